package asym

import "fmt"

// Coll names a collective operation.
type Coll uint8

// The collectives that Plan knows. The order is fixed: drivers may store a Coll.
const (
	Gather Coll = iota
	Gatherv
	Scatter
	Scatterv
	Bcast
	Reduce
	Allgather
	Allgatherv
	Allreduce
	Alltoall
	Alltoallv
	ReduceScatter
	Barrier
	numColls
)

var collNames = [numColls]string{
	Gather:        "gather",
	Gatherv:       "gatherv",
	Scatter:       "scatter",
	Scatterv:      "scatterv",
	Bcast:         "bcast",
	Reduce:        "reduce",
	Allgather:     "allgather",
	Allgatherv:    "allgatherv",
	Allreduce:     "allreduce",
	Alltoall:      "alltoall",
	Alltoallv:     "alltoallv",
	ReduceScatter: "reduce_scatter",
	Barrier:       "barrier",
}

// Colls returns every collective, in declaration order.
func Colls() []Coll {
	cs := make([]Coll, numColls)
	for i := range cs {
		cs[i] = Coll(i)
	}
	return cs
}

// String returns the collective's name as UCC spells it ("reduce_scatter").
func (c Coll) String() string {
	if c < numColls {
		return collNames[c]
	}
	return fmt.Sprintf("Coll(%d)", uint8(c))
}

// ParseColl is the inverse of String.
func ParseColl(s string) (Coll, error) {
	for i, n := range collNames {
		if n == s {
			return Coll(i), nil
		}
	}
	return 0, &argError{fmt.Sprintf("asym: unknown collective %q", s)}
}

// Valid reports whether c is one of the declared collectives.
func (c Coll) Valid() bool { return c < numColls }

// IsRooted reports whether the collective has a root: only the root holds both a source
// and a destination buffer.
func (c Coll) IsRooted() bool {
	switch c {
	case Gather, Gatherv, Scatter, Scatterv, Bcast, Reduce:
		return true
	}
	return false
}

// IsReduction reports whether the collective combines data with a reduction operator,
// which the CPU runs: its buffers must be CPU-accessible as well as NIC-registrable.
func (c Coll) IsReduction() bool {
	switch c {
	case Reduce, Allreduce, ReduceScatter:
		return true
	}
	return false
}

// srcIsV and dstIsV report which buffers are described by per-rank counts and
// displacements instead of one count.
func (c Coll) srcIsV() bool { return c == Scatterv || c == Alltoallv }
func (c Coll) dstIsV() bool { return c == Gatherv || c == Allgatherv || c == Alltoallv }

// replacesSrc reports which buffer the baseline replaces on an asymmetric rank: the
// source for scatter-like collectives (the destination's type wins), else the destination
// (the source's type wins).
func (c Coll) replacesSrc() bool { return c == Scatter || c == Scatterv }
