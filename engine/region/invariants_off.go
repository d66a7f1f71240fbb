//go:build !invariants

package region

func (m *mergeIter) checkForwardOrder()      {}
func (m *mergeIter) resetOrder()             {}
func (m *mergeIter) checkTop()               {}
func (s *RegionScanner) checkVisible(uint64) {}

// storeFileOverReleased: a release past the last reference, refused (counted back) in every
// build; invariants builds panic.
func storeFileOverReleased(*storeFile) {}
