package tlmlx5

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
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

// zeroCases are collectives in which some or all ranks' parts are empty, on a team
// of n: alltoall of count 0, an alltoallv with a few non-empty pairs, and gatherv and
// scatterv with one non-empty block, rooted at 0 and 1.
func zeroCases(n int) []*collCase {
	var out []*collCase
	out = append(out, plainCase(collective.Alltoall, "pairwise", n, 0, 0, collective.Uint8, 0))
	a2v := plainCase(collective.Alltoallv, "", n, 0, 0, collective.Int32, 0)
	a2v.m = make([][]int, n)
	for p := range n {
		a2v.m[p] = make([]int, n)
		for r := range n {
			if (p+r)%2 == 0 && p != r {
				a2v.m[p][r] = 3
			}
		}
	}
	out = append(out, a2v)
	for root := range min(n, 2) {
		gv := plainCase(collective.Gatherv, "", n, root, 0, collective.Int32, 0)
		gv.counts = make([]int, n)
		gv.counts[root] = 2
		out = append(out, gv)
		sv := plainCase(collective.Scatterv, "", n, root, 0, collective.Int32, 0)
		sv.counts = make([]int, n)
		sv.counts[(root+1)%n] = 2
		out = append(out, sv)
	}
	return out
}

// contiguous gives cs's v-layouts contiguous displacements.
func contiguous(cs *collCase) {
	n := cs.n
	if cs.counts != nil {
		d := make([]int, n)
		o := 0
		for i, c := range cs.counts {
			d[i] = o
			o += c
		}
		for r := range n {
			switch cs.c {
			case collective.Gatherv:
				cs.dstDispls[r] = d
			case collective.Scatterv:
				cs.srcDispls[r] = d
			}
		}
	}
	if cs.m != nil {
		for p := range n {
			s, o := make([]int, n), 0
			for r := range n {
				s[r] = o
				o += cs.m[p][r]
			}
			cs.srcDispls[p] = s
			d, o2 := make([]int, n), 0
			for r := range n {
				d[r] = o2
				o2 += cs.m[r][p]
			}
			cs.dstDispls[p] = d
		}
	}
}

// TestEagerZeroCounts: collectives with empty parts, persistent, on teams of 2 to 5
// ranks from first contact (no ring known, so the first zero-byte messages are
// rendezvous requests), 40 posts each, the last rank posting and polled alone first,
// data-checked; with and without the outbox (without it every zero-byte send is a
// rendezvous request, answered by a send with immediate and no data). No link breaks.
func TestEagerZeroCounts(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, outbox := range []bool{true, false} {
		for n := 2; n <= 5; n++ {
			for _, cs0 := range zeroCases(n) {
				cs := cs0
				contiguous(cs)
				t.Run(fmt.Sprintf("outbox=%v/%v", outbox, cs), func(t *testing.T) {
					old := eagerCopyOut
					eagerCopyOut = outbox
					defer func() { eagerCopyOut = old }()
					ft := newFakeTeam(t, n, nil)
					runs := cs.build(t, ft.newSeq())
					tasks := ft.newTasks(t, runs)
					defer ft.quiesce(t, tasks)
					const posts = 40
					for post := uint32(1); post <= posts; post++ {
						in := fill(rnd, runs)
						want := cs.expect(t, runs, in)
						// The last rank posts first and is polled alone a while.
						require.NoError(t, tasks[n-1].Post(post))
						for i := 0; i < 20; i++ {
							ft.poll(t)
						}
						for r := 0; r < n-1; r++ {
							require.NoError(t, tasks[r].Post(post))
						}
						ft.finish(t, tasks, post, runs, want)
					}
					for r, ep := range ft.eps {
						require.NoError(t, ep.(*team).Broken(), "rank %d", r)
					}
				})
			}
		}
	}
}
