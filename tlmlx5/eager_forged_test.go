package tlmlx5

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The eager ring's bookkeeping against messages that break the protocol (a peer's
// bytes are checked before use, eager.go): a credit for a slot that is not in use and
// a header for a slot that already holds a message are dropped. Either, taken,
// would put two messages in one slot: the second overwrites the first's data, or is
// dropped as a slot already held while its receive waits for it until its deadline.

// TestEagerCreditForFreeSlotIgnored: rank 0 returns a credit for a slot of its ring
// that rank 1 holds as free already: rank 1's credits stay as they were, each slot
// once.
func TestEagerCreditForFreeSlotIgnored(t *testing.T) {
	ft := newFakeTeam(t, 2, nil)
	ft.warm(t)
	sender := ft.eps[1].(*team)
	e := sender.peers[0].eager
	ft.settle(t)
	s := slices.Index(e.busy, false)
	require.GreaterOrEqual(t, s, 0, "no free slot after the warm-up")
	before := slices.Clone(e.free)
	sender.onSlot(0, encodeCredit(make([]byte, slotSize), []uint16{uint16(s)}), ft.hs[1])
	require.ElementsMatch(t, before, e.free, "a credit for slot %d, which rank 1 has not written, changed its credits", s)
}

// TestEagerHeaderForHeldSlotDropped: rank 1 sends two headers naming one slot of rank
// 0's ring for a collective rank 0 has no task for yet: the first is kept with its
// slot, the second is dropped rather than kept over the first's data.
func TestEagerHeaderForHeldSlotDropped(t *testing.T) {
	ft := newFakeTeam(t, 2, nil)
	ft.warm(t)
	ft.settle(t)
	recv := ft.eps[0].(*team)
	e := recv.peers[1].eager
	s := slices.Index(e.held, false)
	require.GreaterOrEqual(t, s, 0, "no free slot after the warm-up")
	seq := ft.newSeq() // no task on rank 0 yet: its headers are kept
	require.Zero(t, earlyLen(recv))
	for tag := range 2 {
		h := eagerHdr{seq: seq, post: 1, tag: tag, n: 8, slot: s, root: noRoot}
		recv.onSlot(1, h.encode(make([]byte, slotSize)), ft.hs[0])
	}
	require.True(t, e.held[s], "the first header holds slot %d", s)
	require.Equal(t, 1, earlyLen(recv), "the second header for slot %d is kept too", s)
	require.Equal(t, 0, recv.early[0].tag, "the kept header is not the first one")
}
