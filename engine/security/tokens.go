package security

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// TokenPrefix starts every token NewToken makes (so that a leaked one is recognisable).
const TokenPrefix = "cst_"

// NewToken makes a random bearer token (256 bits) and the token-file line that admits it for user
// and groups. Only the line goes to the servers: it holds the token's SHA-256, not the token.
func NewToken(user string, groups []string) (token, line string, err error) {
	if err := checkName("user", user); err != nil {
		return "", "", err
	}
	for _, g := range groups {
		if err := checkName("group", g); err != nil {
			return "", "", err
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, TokenLine(token, user, groups), nil
}

// TokenLine is the token-file line that admits token for user and groups.
func TokenLine(token, user string, groups []string) string {
	line := "sha256:" + hashToken(token) + " " + user
	if len(groups) > 0 {
		line += " " + strings.Join(groups, ",")
	}
	return line
}

func hashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func checkName(what, s string) error {
	if s == "" || strings.ContainsAny(s, " \t\r\n,#") {
		return fmt.Errorf("%s name %q: must be non-empty, with no spaces, commas or '#'", what, s)
	}
	return nil
}

// Tokens are the bearer tokens servers accept: a file of lines
//
//	sha256:<hex SHA-256 of the token> <user> [<group>,<group>...]
//
// ('#' starts a comment). The path may also be a directory: every file in it (not starting with
// '.') holds such lines — a mounted Kubernetes Secret with one key per user, as the operator
// keeps it. The file is read again when it changes (a Kubernetes Secret volume
// updated in place), checked at most once a second, so an added token works and a removed one is
// refused within seconds; a file that no longer parses keeps the previous tokens (Err says why).
type Tokens struct {
	path string
	now  func() time.Time

	mu      sync.Mutex
	checked time.Time
	stamp   string
	byHash  map[string]Identity
	gen     uint64 // counts successful reloads
	lastErr error
}

// LoadTokens reads the token file at path, which must parse now.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path, now: time.Now}
	stamp, err := tokenStamp(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	data, err := readTokenSource(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if t.byHash, err = parseTokens(data); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	t.stamp, t.checked = stamp, t.now()
	return t, nil
}

// tokenFiles are the files a token path names: itself, or the files of a directory.
func tokenFiles(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue // the kubelet's ..data and its timestamped directories
		}
		p := filepath.Join(path, e.Name())
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			out = append(out, p)
		}
	}
	return out, nil
}

// tokenStamp changes when a token file (or a file of the directory) changes.
func tokenStamp(path string) (string, error) {
	files, err := tokenFiles(path)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %d %d\n", f, fi.ModTime().UnixNano(), fi.Size())
	}
	return b.String(), nil
}

func readTokenSource(path string) ([]byte, error) {
	files, err := tokenFiles(path)
	if err != nil {
		return nil, err
	}
	var all []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		all = append(append(all, b...), '\n')
	}
	return all, nil
}

func parseTokens(data []byte) (map[string]Identity, error) {
	out := map[string]Identity{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: want 'sha256:<hex> <user> [<group>,...]'", n)
		}
		h, ok := strings.CutPrefix(f[0], "sha256:")
		if raw, err := hex.DecodeString(h); !ok || err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("line %d: %q is not sha256:<64 hex digits> (the token's hash, never the token)", n, f[0])
		}
		id := Identity{User: f[1], Method: MethodToken}
		if len(f) == 3 {
			id.Groups = strings.Split(f[2], ",")
		}
		out[strings.ToLower(h)] = id
	}
	return out, sc.Err()
}

// Lookup returns the identity token admits.
func (t *Tokens) Lookup(token string) (Identity, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refresh()
	id, ok := t.byHash[hashToken(token)]
	return id, ok
}

// Generation looks at the file (at most once a second) and returns how many times it has been
// reloaded: when it changes, connections authenticated by a token check it again (Lookup), so a
// token removed from the file stops working on connections already open too.
func (t *Tokens) Generation() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refresh()
	return t.gen
}

// Err is the error of the last reload that failed, nil once one succeeds.
func (t *Tokens) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastErr
}

func (t *Tokens) refresh() {
	now := t.now()
	if now.Sub(t.checked) < checkEvery {
		return
	}
	t.checked = now
	st, err := tokenStamp(t.path)
	if err != nil {
		t.lastErr = fmt.Errorf("token file: %w (the previous tokens stay in use)", err)
		return
	}
	if st == t.stamp {
		return
	}
	data, err := readTokenSource(t.path)
	if err == nil {
		var m map[string]Identity
		if m, err = parseTokens(data); err == nil {
			t.byHash, t.stamp, t.lastErr = m, st, nil
			t.gen++
			return
		}
	}
	t.lastErr = fmt.Errorf("token file %s: %w (the previous tokens stay in use)", t.path, err)
}
