package master

// SetMaxReassignBytes sets the bound of one catalog write of a dead server's reassignment for a
// test, and gives the restore.
func SetMaxReassignBytes(n int) (restore func()) {
	old := maxReassignBytes
	maxReassignBytes = n
	return func() { maxReassignBytes = old }
}
