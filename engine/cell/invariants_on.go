//go:build invariants

package cell

import "fmt"

// Invariants reports whether the binary was built with the invariants tag.
const Invariants = true

func checkKey(k []byte) {
	if _, err := ParseKey(k); err != nil {
		panic(fmt.Sprintf("cell: invariant violated: comparing a malformed key %x: %v", k, err))
	}
}
