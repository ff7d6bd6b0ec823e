package tlmlx5

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
)

// TestEagerZeroRunAhead: the leaf of a persistent 2-rank gatherv whose own block is
// empty posts while the root does not. A zero-byte send holds a slot of the root's
// ring like any message, so the leaf finishes at most a ring's worth of posts ahead,
// then asks for a ready-to-receive and waits; the root keeps at most that many
// headers and breaks no link. Once the root posts, both go on, and a few hundred
// posts later nothing is left held. (Its headers went slotless and done at once
// before: the leaf ran thousands of posts ahead and the root failed it past
// maxEarly.)
func TestEagerZeroRunAhead(t *testing.T) {
	const n = 2
	ft := newFakeTeam(t, n, nil)
	ft.warm(t)
	cs := plainCase(collective.Gatherv, "", n, 0, 0, collective.Uint8, 0)
	cs.counts = []int{4, 0}
	cs.dstDispls = [][]int{{0, 4}, {0, 4}}
	cs.srcDispls = [][]int{nil, nil}
	runs := cs.build(t, ft.newSeq())
	tasks := ft.newTasks(t, runs)
	defer ft.quiesce(t, tasks)
	root, leaf := tasks[0], tasks[1]
	rt := ft.eps[0].(*team)
	ahead := 0
	for p := uint32(1); ; p++ {
		require.NoError(t, leaf.Post(p))
		if !ft.pollUntil(t, 100*time.Millisecond, func() bool { d, err := leaf.State(); return d || err != nil }) {
			break
		}
		_, err := leaf.State()
		require.NoError(t, err, "post %d", p)
		ahead++
		require.LessOrEqual(t, ahead, rt.eagerSlots, "the leaf ran past its credits")
	}
	require.Equal(t, rt.eagerSlots, ahead, "the leaf finishes a ring's worth of posts ahead")
	require.Contains(t, leaf.Waiting(), "to be ready", "the post after them waits for the root")
	require.NoError(t, rt.Broken())
	require.LessOrEqual(t, len(rt.early), rt.eagerSlots+1, "headers the root keeps")

	// The root catches up, and both run on in step.
	const more = 300
	for p := uint32(1); p <= uint32(ahead+1); p++ {
		require.NoError(t, root.Post(p))
		require.True(t, ft.pollUntil(t, pollTimeout, func() bool { d, err := root.State(); return d || err != nil }), "root post %d", p)
		_, err := root.State()
		require.NoError(t, err, "root post %d", p)
	}
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }), "the leaf's waiting post: %s", waiting(tasks))
	for p := uint32(ahead + 2); p <= uint32(ahead+1+more); p++ {
		for r, err := range ft.post(t, tasks, p) {
			require.NoError(t, err, "post %d rank %d", p, r)
		}
	}
	ft.settle(t)
	require.NoError(t, rt.Broken())
	require.Empty(t, rt.early, "headers left held")
	require.Less(t, 2*len(rt.peers[1].eager.freed), rt.eagerSlots, "slots freed and not returned: they go back half a ring at a time")
}

// TestEagerSlotlessHeaderDropped: an eager header that names no slot and is no
// rendezvous request carries no data (every message comes in a slot), so it is
// dropped as malformed: a forged one with the receive's size does not complete the
// receive, whose block keeps what it had; the real message still arrives.
func TestEagerSlotlessHeaderDropped(t *testing.T) {
	const n = 2
	ft := newFakeTeam(t, n, nil)
	ft.warm(t)
	cs := plainCase(collective.Gather, "linear", n, 0, 100, collective.Uint8, 0)
	runs := cs.build(t, ft.newSeq())
	root, err := ft.newTask(0, &runs[0].spec)
	require.NoError(t, err)
	k := root.(*task)
	for i := range runs[0].dst.b {
		runs[0].dst.b[i] = 0xEE
	}
	for i := range runs[1].src.b {
		runs[1].src.b[i] = byte(i + 1)
	}
	require.NoError(t, root.Post(1))
	recv := ft.eps[0].(*team)
	o := &k.ops[k.recvByTag[1]]
	for _, n := range []int{o.n, 0} {
		h := eagerHdr{seq: k.seq, post: 1, tag: o.tag, n: n, sig: k.sig, root: 0, slot: noSlot}
		recv.onSlot(1, h.encode(make([]byte, slotSize)), ft.hs[0])
		ft.settle(t)
		done, err := root.State()
		require.False(t, done, "a slotless header of %d bytes completed the receive", n)
		require.NoError(t, err)
	}
	require.Equal(t, strings.Repeat("\xee", 100), string(runs[0].dst.b[100:200]), "rank 1's block was written")

	leaf, err := ft.newTask(1, &runs[1].spec)
	require.NoError(t, err)
	tasks := []driver.Task{root, leaf}
	require.NoError(t, leaf.Post(1))
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }), waiting(tasks))
	_, errs := states(tasks)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, runs[1].src.b[:100], runs[0].dst.b[100:200], "rank 1's real message")
	ft.quiesce(t, tasks)
}
