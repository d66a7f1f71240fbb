//go:build !invariants

package region

func (m *mergeIter) checkForwardOrder()      {}
func (m *mergeIter) resetOrder()             {}
func (s *RegionScanner) checkVisible(uint64) {}
