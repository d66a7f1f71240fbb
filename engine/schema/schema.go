// Package schema holds the rules for names and limits that every layer checks: the shell and the
// client before they send a request, the master before it changes the catalog, the region before
// it opens. They are written once, here, so the layers cannot disagree — a family name the master
// accepted and every region refused would take a table offline at the next alter.
//
// The limits of one cell (row, family and qualifier lengths, a cell's serialized size) are the
// cell package's (cell.Validate), which the client and the region both call; this package covers
// the names of namespaces, tables and families and a table descriptor's numbers, and renders user
// bytes in error texts (Key).
package schema

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
	"github.com/cellstore/cellstore/engine/cell"
)

const (
	// DefaultNamespace is the namespace of a table named without one.
	DefaultNamespace = "default"
	// SystemNamespace is HBase's namespace of system tables (hbase:meta and the like): users
	// cannot create tables in it.
	SystemNamespace = "hbase"
	// MaxNamespaceLength and MaxTableNameLength bound names, in bytes.
	MaxNamespaceLength = 128
	MaxTableNameLength = 255
	// MaxFamilyLength is the longest family name: its length is one signed byte in a cell's key,
	// as in HBase.
	MaxFamilyLength = cell.MaxFamilyLength
	// MaxReplication bounds a table's REGION_REPLICATION.
	MaxReplication = 16
)

// Namespace checks a namespace name: 1 to 128 letters, digits and '_'.
func Namespace(ns string) error {
	if ns == "" || len(ns) > MaxNamespaceLength {
		return fmt.Errorf("namespace %s must be 1 to %d characters", Key(ns), MaxNamespaceLength)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("namespace %s: character %s is not allowed (letters, digits and '_')", Key(ns), byteText(c))
		}
	}
	return nil
}

// Table checks a table's namespace and name (HBase's rules for a qualifier: letters, digits, '_',
// '-' and '.', not starting with '.' or '-', at most 255 bytes).
func Table(ns, name string) error {
	if name == "" {
		return fmt.Errorf("table name is empty")
	}
	if err := Namespace(ns); err != nil {
		return err
	}
	if len(name) > MaxTableNameLength {
		return fmt.Errorf("table name %s is longer than %d characters", Key(name), MaxTableNameLength)
	}
	if name[0] == '.' || name[0] == '-' {
		return fmt.Errorf("table name %s must not start with '.' or '-'", Key(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("table name %s: character %s is not allowed (letters, digits, '_', '-' and '.')", Key(name), byteText(c))
		}
	}
	return nil
}

// TableName is Table for a message's table name; nil is an error, and an empty namespace is the
// default one (the master fills it in).
func TableName(t *pb.TableName) error {
	if t == nil {
		return fmt.Errorf("table name is empty")
	}
	ns := t.GetNamespace()
	if ns == "" {
		ns = DefaultNamespace
	}
	return Table(ns, t.GetName())
}

// UserTable is TableName for a table a user creates: the system namespace is reserved.
func UserTable(t *pb.TableName) error {
	if err := TableName(t); err != nil {
		return err
	}
	if t.GetNamespace() == SystemNamespace {
		return fmt.Errorf("namespace %q is reserved for system tables: create %s in another namespace", SystemNamespace, t.GetName())
	}
	return nil
}

// Family checks a column family name. It is a directory name on storage: 1 to 127 bytes of
// printable ASCII without '/', ':' or '\', not starting with '.'.
func Family[T string | []byte](f T) error {
	if len(f) == 0 {
		return fmt.Errorf("column family name is empty")
	}
	if len(f) > MaxFamilyLength {
		return fmt.Errorf("column family name %s is longer than %d bytes", Key(f), MaxFamilyLength)
	}
	if f[0] == '.' {
		return fmt.Errorf("column family name %s must not start with '.'", Key(f))
	}
	for i := 0; i < len(f); i++ {
		if c := f[i]; c < 0x21 || c > 0x7e || c == '/' || c == ':' || c == '\\' {
			return fmt.Errorf("column family name %s: byte %s is not allowed (printable ASCII without '/', ':' or '\\')", Key(f), byteText(c))
		}
	}
	return nil
}

// Descriptor checks a table descriptor as a client sends it: its name, families and numbers.
// (The reserved namespace is the caller's concern: UserTable.)
func Descriptor(td *pb.TableDescriptor) error {
	if td == nil {
		return fmt.Errorf("table descriptor is empty")
	}
	if err := TableName(td.GetName()); err != nil {
		return err
	}
	if len(td.GetFamilies()) == 0 {
		return fmt.Errorf("table %s:%s has no column families: give at least one", td.GetName().GetNamespace(), td.GetName().GetName())
	}
	seen := make(map[string]bool, len(td.GetFamilies()))
	for _, f := range td.GetFamilies() {
		if err := Family(f.GetName()); err != nil {
			return err
		}
		if seen[string(f.GetName())] {
			return fmt.Errorf("column family %s is listed twice", Key(f.GetName()))
		}
		seen[string(f.GetName())] = true
		switch {
		case f.GetMaxVersions() < 0:
			return fmt.Errorf("column family %s: VERSIONS %d is negative", Key(f.GetName()), f.GetMaxVersions())
		case f.GetMinVersions() < 0:
			return fmt.Errorf("column family %s: MIN_VERSIONS %d is negative", Key(f.GetName()), f.GetMinVersions())
		case f.GetMinVersions() > max(f.GetMaxVersions(), 1): // VERSIONS 0 is the default, 1
			return fmt.Errorf("column family %s: MIN_VERSIONS %d exceeds VERSIONS %d", Key(f.GetName()), f.GetMinVersions(), max(f.GetMaxVersions(), 1))
		case f.GetTtlSeconds() < 0:
			return fmt.Errorf("column family %s: TTL %d is negative", Key(f.GetName()), f.GetTtlSeconds())
		case f.GetBlockSize() < 0:
			return fmt.Errorf("column family %s: BLOCKSIZE %d is negative", Key(f.GetName()), f.GetBlockSize())
		}
	}
	switch {
	case td.GetRegionReplication() < 0:
		return fmt.Errorf("REGION_REPLICATION %d is negative", td.GetRegionReplication())
	case td.GetRegionReplication() > MaxReplication:
		return fmt.Errorf("REGION_REPLICATION %d exceeds %d", td.GetRegionReplication(), MaxReplication)
	case td.GetMaxFileSize() < 0:
		return fmt.Errorf("MAX_FILESIZE %d is negative", td.GetMaxFileSize())
	case td.GetMemstoreFlushSize() < 0:
		return fmt.Errorf("MEMSTORE_FLUSHSIZE %d is negative", td.GetMemstoreFlushSize())
	}
	return nil
}

// Key renders user bytes (a row, a family, a qualifier, a name) for an error text: quoted,
// UTF-8 text as it is, and every byte that is not printable UTF-8 escaped (\xNN, \n, \u00a0…).
// The result is always valid UTF-8 — error texts travel in protobuf strings, which must be —
// and a byte is never taken for a Latin-1 character.
func Key[T string | []byte](b T) string { return strconv.Quote(string(b)) }

// byteText renders one byte of a name: 'a', '\x00', and '\xe9' for a byte above 0x7f — fmt's %q
// of a byte would print the Latin-1 character (é), which is not what the name holds.
func byteText(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf(`'\x%02x'`, c)
}
