//go:build !invariants

package region

const invariants = false

func (m *mergeIter) checkForwardOrder()      {}
func (m *mergeIter) resetOrder()             {}
func (s *RegionScanner) checkVisible(uint64) {}
