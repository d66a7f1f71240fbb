package master

// SetMaxBatchBytes sets the bound of a catalog write of the master's loop for a
// test, and gives the restore.
func SetMaxBatchBytes(n int) (restore func()) {
	old := maxBatchBytes
	maxBatchBytes = n
	return func() { maxBatchBytes = old }
}
