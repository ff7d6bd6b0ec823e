package coll

// FaultsSeen returns how many steps of kind k t's rank has counted: a fault
// (k, rank, N) has fired on that rank once this reaches N. The soak test tells
// faults that fired from faults that never did with it.
func FaultsSeen(t *Team, k FaultKind) int64 { return t.fs.Seen(k) }
