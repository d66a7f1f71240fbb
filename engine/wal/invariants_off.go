//go:build !invariants

package wal

// Invariants reports whether the binary was built with the invariants tag.
const Invariants = false

func checkAppended([]byte, *Edit, uint64) {}

func checkSeqIncreasing(prev, seq uint64) {}

func checkDurable(prev, next, assigned uint64) {}

func checkCommitMarker(prev, synced, start int64) {}
