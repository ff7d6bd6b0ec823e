package main

import "github.com/ibcoll/ibcoll/coll"

// shape is one rank's buffers for one collective and block size, in
// elements. A "block" is the -b/-e message size: what one rank contributes
// (gather, scatter, allgather), sends to each peer (alltoall), or the whole
// vector (bcast, reduce, allreduce).
type shape struct {
	c       coll.CollType
	rank    int
	n       int // team size
	count   int // elements per block
	root    int
	inPlace bool

	srcCount int // elements of the src buffer; 0 = no src buffer
	dstCount int
	counts   []int // v-collectives
	displs   []int
	vExtent  int // elements of the v-side buffer
}

func newShape(c coll.CollType, rank, n, count, root int, inPlace bool) shape {
	s := shape{c: c, rank: rank, n: n, count: count, root: root, inPlace: inPlace}
	isRoot := rank == root
	switch c {
	case coll.Gather:
		s.srcCount = count
		if isRoot {
			s.dstCount = n * count
		}
	case coll.Scatter:
		s.dstCount = count
		if isRoot {
			s.srcCount = n * count
		}
	case coll.Gatherv, coll.Scatterv:
		s.counts, s.displs, s.vExtent = vLayout(n, count)
		if c == coll.Gatherv {
			s.srcCount = s.counts[rank]
			if isRoot {
				s.dstCount = s.vExtent
			}
		} else {
			s.dstCount = s.counts[rank]
			if isRoot {
				s.srcCount = s.vExtent
			}
		}
	case coll.Bcast:
		s.srcCount = count
	case coll.Reduce:
		s.srcCount = count
		if isRoot {
			s.dstCount = count
		}
	case coll.Allgather:
		s.srcCount, s.dstCount = count, n*count
	case coll.Allreduce:
		s.srcCount, s.dstCount = count, count
	case coll.Alltoall:
		s.srcCount, s.dstCount = n*count, n*count
	}
	if inPlace && s.inPlaceApplies() {
		// The one buffer that remains carries the input.
		if c == coll.Scatter || c == coll.Scatterv {
			s.dstCount = 0
		} else {
			s.srcCount = 0
		}
	}
	return s
}

// inPlaceApplies says whether this rank has an in-place buffer: roots of
// rooted collectives (not bcast) and every rank of the others.
func (s shape) inPlaceApplies() bool {
	switch s.c {
	case coll.Bcast, coll.Barrier:
		return false
	case coll.Gather, coll.Gatherv, coll.Scatter, coll.Scatterv, coll.Reduce:
		return s.rank == s.root
	}
	return true
}

// vLayout gives rank r count+(r%3)-1 elements (never negative), laid out
// in reverse rank order with a one-element gap after each block, so that
// displacements are unsorted and gaps exist.
func vLayout(n, count int) (counts, displs []int, extent int) {
	counts, displs = make([]int, n), make([]int, n)
	off := 0
	for r := n - 1; r >= 0; r-- {
		counts[r] = max(0, count+(r%3)-1)
		displs[r] = off
		off += counts[r] + 1
	}
	return counts, displs, off
}

// inputIsDst says whether this rank's input is in its destination buffer.
func (s shape) inputIsDst() bool {
	return s.inPlace && s.inPlaceApplies() && s.c != coll.Scatter && s.c != coll.Scatterv
}
