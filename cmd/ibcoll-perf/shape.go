package main

import (
	"fmt"

	"github.com/ibcoll/ibcoll/coll"
)

// shape is one rank's buffers for one collective and block size, in
// elements. A "block" is the -b/-e message size: what one rank contributes
// (gather, scatter, allgather, allgatherv), sends to each peer (alltoall,
// alltoallv), receives (reduce_scatter), or the whole vector (bcast, reduce,
// allreduce). The v-collectives vary the block from rank to rank (vLayout)
// or pair to pair (pairCount) around it.
type shape struct {
	c       coll.CollType
	rank    int
	n       int // team size
	count   int // elements per block
	root    int
	inPlace bool

	srcCount int // elements of the src buffer; 0 = no src buffer
	dstCount int
	// The v-layout buffer of a v-collective: dst for gatherv, allgatherv
	// and alltoallv, src for scatterv. Every rank has the same one, except
	// for alltoallv, where it is this rank's receive side.
	counts  []int
	displs  []int
	vExtent int
	// alltoallv's send side (src), unused in place.
	sendCounts []int
	sendDispls []int
	sendExtent int
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
	case coll.Gatherv, coll.Scatterv, coll.Allgatherv:
		s.counts, s.displs, s.vExtent = vLayout(n, count)
		switch {
		case c == coll.Scatterv:
			s.dstCount = s.counts[rank]
			if isRoot {
				s.srcCount = s.vExtent
			}
		case isRoot || c == coll.Allgatherv:
			s.srcCount, s.dstCount = s.counts[rank], s.vExtent
		default:
			s.srcCount = s.counts[rank]
		}
	case coll.Alltoallv:
		send, recv := make([]int, n), make([]int, n)
		for p := range n {
			send[p] = pairCount(count, rank, p, inPlace)
			recv[p] = pairCount(count, p, rank, inPlace)
		}
		s.counts = recv
		s.displs, s.vExtent = placeBlocks(recv, true, 1)
		s.dstCount = s.vExtent
		if !inPlace {
			s.sendCounts = send
			s.sendDispls, s.sendExtent = placeBlocks(send, false, 2)
			s.srcCount = s.sendExtent
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
	case coll.ReduceScatter:
		s.srcCount, s.dstCount = n*count, count
	}
	if inPlace && s.inPlaceApplies() {
		// The one buffer that remains carries the input.
		switch c {
		case coll.Scatter, coll.Scatterv:
			s.dstCount = 0
		case coll.ReduceScatter:
			s.srcCount, s.dstCount = 0, n*count
		default:
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
	counts = make([]int, n)
	for r := range counts {
		counts[r] = vary(count, r)
	}
	displs, extent = placeBlocks(counts, true, 1)
	return counts, displs, extent
}

// pairCount is the number of elements rank from sends rank to in an
// alltoallv: the block give or take one, never negative. Every rank
// computes the whole matrix alike from the block alone. It varies along
// rows and columns, and a rank's send and receive counts differ (2·from+to
// is not symmetric), so that a mix-up of the two sides shows; in place it
// must be symmetric, since one layout describes both directions.
func pairCount(count, from, to int, symmetric bool) int {
	k := 2*from + to
	if symmetric {
		k = from + to
	}
	return vary(count, k)
}

// vary is block count give or take one (by k%3), never negative; an empty block
// stays empty, so that -b 0's row moves nothing in the v-collectives too.
func vary(count, k int) int {
	if count == 0 {
		return 0
	}
	return max(0, count+k%3-1)
}

// placeBlocks lays counts out in rank order, or reverse rank order, with gap
// elements after each block: the gaps must stay untouched.
func placeBlocks(counts []int, reverse bool, gap int) (displs []int, extent int) {
	n := len(counts)
	displs = make([]int, n)
	for i := range n {
		r := i
		if reverse {
			r = n - 1 - i
		}
		displs[r] = extent
		extent += counts[r] + gap
	}
	return displs, extent
}

// inputIsDst says whether this rank's input is in its destination buffer.
func (s shape) inputIsDst() bool {
	return s.inPlace && s.inPlaceApplies() && s.c != coll.Scatter && s.c != coll.Scatterv
}

// locate names the part of this rank's output buffer that element e lies
// in, so that a mismatch says which peer's data went wrong ("" where the
// output is one block).
func (s shape) locate(e int) string {
	switch s.c {
	case coll.Gatherv, coll.Allgatherv, coll.Alltoallv:
		for p := range s.n {
			if e >= s.displs[p] && e < s.displs[p]+s.counts[p] {
				return fmt.Sprintf("rank %d's block, its element %d", p, e-s.displs[p])
			}
		}
		return "a gap between blocks, which must stay untouched"
	case coll.Gather, coll.Allgather, coll.Alltoall, coll.ReduceScatter:
		if s.count == 0 || (s.c == coll.ReduceScatter && !s.inputIsDst()) {
			return ""
		}
		p := e / s.count
		what := fmt.Sprintf("rank %d's block, its element %d", p, e%s.count)
		if s.c == coll.ReduceScatter && p != s.rank {
			what += ", which must keep its input"
		}
		return what
	}
	return ""
}
