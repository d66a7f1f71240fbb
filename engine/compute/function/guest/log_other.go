//go:build !wasip1

package guest

// Log is a no-op outside WebAssembly (native tests of a function's logic).
func Log(string) {}
