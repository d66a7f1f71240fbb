package cellstorev1

// Writes says whether the region action holds a mutation: its region is written (the server
// checks it may write there, and the answer carries the region's write pressure).
func (ra *RegionAction) Writes() bool {
	for _, a := range ra.GetActions() {
		if a.GetMutation() != nil {
			return true
		}
	}
	return false
}
