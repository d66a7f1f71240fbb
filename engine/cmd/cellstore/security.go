package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/cellstore/cellstore/engine/access"
	"github.com/cellstore/cellstore/engine/security"
	"github.com/cellstore/cellstore/engine/telemetry"
)

// serverSecurityFlags are a server's TLS and authentication settings (docs/security.md).
type serverSecurityFlags struct {
	files      security.Files
	mode       string
	tokenFile  string
	superusers []string
}

func addServerSecurityFlags(fl *pflag.FlagSet, f *serverSecurityFlags) {
	fl.StringVar(&f.files.Cert, "tls-cert-file", "", "PEM certificate (chain) of this server: every port serves TLS 1.3 with it, and it is presented when calling other servers (read again when the file changes)")
	fl.StringVar(&f.files.Key, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fl.StringVar(&f.files.CA, "tls-ca-file", "", "PEM CA certificate(s) that sign client and server certificates: checks clients' certificates and other servers'")
	fl.StringVar(&f.mode, "security", "off", "on: every connection must prove its user (a client certificate signed by --tls-ca-file, or a token of --token-file); off: callers are trusted as the user they name")
	fl.StringSliceVar(&f.superusers, "superusers", []string{"@cellstore:servers"}, "with --security=on: users and @groups that may do anything, whatever is granted; must include the servers' own certificates (their CN, or @group for their O)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file of accepted bearer tokens, one 'sha256:<hex> <user> [<group>,...]' per line (made by 'cellstore token create'; read again when it changes)")
}

// serverSecurity is what the flags set up.
type serverSecurity struct {
	certs *security.Certs
	auth  *security.Authenticator
	// authorization: grants are enforced (security on), with superusers.
	authorization bool
	superusers    []string
}

// creds are what the server presents when it calls another server.
func (s serverSecurity) creds() *security.Credentials {
	if s.certs == nil {
		return nil
	}
	return &security.Credentials{Certs: s.certs}
}

// adminHTTP guards a telemetry endpoint's profiling pages with security on: superusers only.
func (s serverSecurity) adminHTTP() func(*http.Request) error {
	if !s.authorization {
		return nil
	}
	return telemetry.SuperusersOnly(s.auth, s.certs, access.NewChecker(0, nil, s.superusers).Superuser)
}

func (s serverSecurity) collectors() []prometheus.Collector {
	if s.certs == nil {
		return nil
	}
	return s.certs.Collectors()
}

func (f *serverSecurityFlags) load(log *slog.Logger) (serverSecurity, error) {
	var s serverSecurity
	switch f.mode {
	case "on", "off":
	default:
		return s, fmt.Errorf("--security must be on or off, got %q", f.mode)
	}
	tlsOn := f.files.Cert != "" || f.files.Key != ""
	switch {
	case !tlsOn && f.files.CA != "":
		return s, errors.New("--tls-ca-file given without --tls-cert-file and --tls-key-file: a server needs its own certificate to serve TLS")
	case f.mode == "on" && (!tlsOn || f.files.CA == ""):
		return s, errors.New("--security=on needs TLS: give --tls-cert-file, --tls-key-file and --tls-ca-file (the CA that signs client certificates); 'cellstore certs' makes a set")
	case f.tokenFile != "" && !tlsOn:
		return s, errors.New("--token-file needs TLS (tokens are never accepted in plaintext): give --tls-cert-file and --tls-key-file")
	}
	if tlsOn {
		certs, err := security.LoadCerts(f.files)
		if err != nil {
			return s, fmt.Errorf("--tls-cert-file/--tls-key-file/--tls-ca-file: %w", err)
		}
		s.certs = certs
	}
	s.auth = &security.Authenticator{Required: f.mode == "on"}
	s.authorization, s.superusers = f.mode == "on", f.superusers
	if s.authorization {
		// Superusers (the region servers among them) may act for other users: a region server
		// forwards an HBase client's master calls as that client's user.
		s.auth.Proxy = access.NewChecker(0, nil, s.superusers).Superuser
	}
	if f.tokenFile != "" {
		t, err := security.LoadTokens(f.tokenFile)
		if err != nil {
			return s, fmt.Errorf("--token-file: %w", err)
		}
		s.auth.Tokens = t
	}
	s.auth.LogMode(log, tlsOn)
	return s, nil
}

// clientSecurityFlags are a client's (shell, pe) TLS and credentials.
type clientSecurityFlags struct {
	files     security.Files
	tokenFile string
}

// Environment variables the client flags default to: the operator sets them in the engine's
// containers, so `kubectl exec ... cellstore shell` connects as the pod's own (server) identity.
const (
	envTLSCA   = "CELLSTORE_TLS_CA_FILE"
	envTLSCert = "CELLSTORE_TLS_CERT_FILE"
	envTLSKey  = "CELLSTORE_TLS_KEY_FILE"
)

func addClientSecurityFlags(fl *pflag.FlagSet, f *clientSecurityFlags) {
	fl.StringVar(&f.files.CA, "tls-ca-file", os.Getenv(envTLSCA), "connect with TLS, checking servers against this PEM CA (the cluster's ca.crt; default $"+envTLSCA+")")
	fl.StringVar(&f.files.Cert, "tls-cert-file", os.Getenv(envTLSCert), "PEM client certificate to present (the user is its subject's CN; default $"+envTLSCert+")")
	fl.StringVar(&f.files.Key, "tls-key-file", os.Getenv(envTLSKey), "PEM private key of --tls-cert-file (default $"+envTLSKey+")")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding a bearer token to present (or set $CELLSTORE_TOKEN); needs --tls-ca-file")
}

// load returns the TLS identity and token the flags and $CELLSTORE_TOKEN give.
func (f *clientSecurityFlags) load() (*security.Certs, string, error) {
	token := os.Getenv("CELLSTORE_TOKEN")
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, "", fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if f.files.Empty() {
		if token != "" {
			return nil, "", errors.New("a token is sent only over TLS: give --tls-ca-file (the cluster's CA certificate)")
		}
		return nil, "", nil
	}
	certs, err := security.LoadCerts(f.files)
	if err != nil {
		return nil, "", fmt.Errorf("--tls-ca-file/--tls-cert-file/--tls-key-file: %w", err)
	}
	return certs, token, nil
}
