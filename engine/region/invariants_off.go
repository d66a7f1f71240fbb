//go:build !invariants

package region

func (m *mergeIter) checkForwardOrder()      {}
func (m *mergeIter) resetOrder()             {}
func (m *mergeIter) checkTop()               {}
func (s *RegionScanner) checkVisible(uint64) {}
