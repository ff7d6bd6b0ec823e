package tlmlx5

import (
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// dmReduction is a persistent int32 sum of count elements per rank on ft (allreduce,
// reduce rooted at the last rank, or reduce_scatter, whose result is count/n
// elements per rank) by algorithm alg, whose sources are DM of each rank's pool and
// whose destinations are host memory. refill puts fresh random sources in; check
// compares every rank's output with the sum of those sources.
type dmReduction struct {
	tasks  []driver.Task
	refill func()
	check  func(post uint32)
}

func newDMReduction(t *testing.T, ft *fakeTeam, c collective.Type, alg string, count int) (*dmReduction, error) {
	rnd := testutil.Rand(t)
	n := ft.n
	root := n - 1
	srcs := make([]*mem.Buffer, n)
	in := make([][]int32, n)
	dsts := make([][]byte, n)
	outCount := count
	if c == collective.ReduceScatter {
		outCount = count / n
	}
	for r := range n {
		b, err := ft.ctx.(*context).AllocDM(4 * count)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		srcs[r] = b
		in[r] = make([]int32, count)
		if c != collective.Reduce || r == root {
			dsts[r] = make([]byte, 4*outCount)
		}
	}
	red := &dmReduction{tasks: make([]driver.Task, n)}
	red.refill = func() {
		raw := make([]byte, 4*count)
		for r := range n {
			for i := range in[r] {
				in[r][i] = int32(rnd.IntN(1<<20)) - 1<<19
				binary.LittleEndian.PutUint32(raw[4*i:], uint32(in[r][i]))
			}
			require.NoError(t, srcs[r].Region().CopyTo(0, raw))
		}
	}
	red.check = func(post uint32) {
		for r := range n {
			if dsts[r] == nil {
				continue
			}
			base := 0
			if c == collective.ReduceScatter {
				base = r * outCount
			}
			for i := range outCount {
				var want int32
				for p := range n {
					want += in[p][base+i]
				}
				got := int32(binary.LittleEndian.Uint32(dsts[r][4*i:]))
				require.Equal(t, want, got, "post %d, rank %d, element %d", post, r, i)
			}
		}
	}
	seq := ft.newSeq()
	for r := range n {
		spec := &driver.TaskSpec{Seq: seq, Type: c, DType: collective.Int32, Op: collective.OpSum, Block: outCount, Persistent: true, Alg: alg,
			Src: driver.Buf{Type: mem.DM, Buf: srcs[r], Addr: srcs[r].Addr(), Bytes: 4 * count, Count: count}}
		if c == collective.Reduce {
			spec.Root, spec.Block = root, count
		}
		if d := dsts[r]; d != nil {
			spec.Dst = driver.Buf{Type: mem.Host, Slice: d, Addr: uintptr(unsafe.Pointer(&d[0])), Bytes: len(d), Count: outCount}
		}
		k, err := ft.newTask(r, spec)
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		red.tasks[r] = k
	}
	return red, nil
}

// TestReductionSourceInDM: where the device reports that the CPU reads its memory
// through uncached loads, the reach lists DM in ReduceSrc, and a reduction takes a DM
// source in place: each rank copies it into host scratch through the loopback at
// every post (one loopback copy per rank and post, none through the CPU), for every
// reduction algorithm, on teams of one rank and of three, with fresh data at each
// post. Where the device reports cached reads (soft0 by default), the reach does not
// list it, and the transport refuses such a source (coll stages it).
func TestReductionSourceInDM(t *testing.T) {
	cases := []struct {
		c   collective.Type
		alg string
	}{
		{collective.Allreduce, "rd"}, {collective.Allreduce, "ring"},
		{collective.Reduce, "knomial"}, {collective.Reduce, "srg"},
		{collective.ReduceScatter, "ring"},
	}
	for _, viaNIC := range []bool{true, false} {
		for _, n := range []int{1, 3} {
			for _, cs := range cases {
				name := fmt.Sprintf("%s/n=%d/%v-%s", map[bool]string{true: "uncached", false: "cached"}[viaNIC], n, cs.c, cs.alg)
				t.Run(name, func(t *testing.T) {
					ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{SoftDMUncached: viaNIC}), n, nil, true)
					if poolOf(ft).Kind() != dm.KindDM {
						t.Fatalf("soft0's pool is %s memory: the test needs device memory", poolOf(ft).Kind())
					}
					reach := ft.ctx.Reach()
					require.Equal(t, viaNIC, reach.ReducesFrom(mem.DM), "reach %v", reach)
					require.False(t, reach.CPUReaches(mem.DM))
					const count, posts = 3 * 200, 3
					red, err := newDMReduction(t, ft, cs.c, cs.alg, count)
					if !viaNIC {
						require.ErrorIs(t, err, driver.ErrNotSupported, "a DM source of a reduction that the reach does not take")
						require.ErrorContains(t, err, "Args.Src")
						return
					}
					require.NoError(t, err)
					for post := uint32(1); post <= posts; post++ {
						red.refill()
						ft.run(t, red.tasks, post)
						red.check(post)
					}
					for r := range n {
						rt := ft.eps[r].(*team)
						require.NotNil(t, rt.lp, "rank %d made no loopback QP", r)
						require.Equal(t, uint64(posts), rt.lp.copies, "rank %d: one loopback copy per post", r)
					}
					ft.quiesce(t, red.tasks)
				})
			}
		}
	}
}

// TestReductionSourceInDMLoopbackFails: a loopback that failed (moved to the error
// state under the transport) fails the post whose source copy it flushed, naming the
// local copy; the next post copies the source by the CPU, with the right sums.
func TestReductionSourceInDMLoopbackFails(t *testing.T) {
	const n, count = 2, 256
	ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{SoftDMUncached: true}), n, nil, true)
	if poolOf(ft).Kind() != dm.KindDM {
		t.Fatalf("soft0's pool is %s memory: the test needs device memory", poolOf(ft).Kind())
	}
	red, err := newDMReduction(t, ft, collective.Allreduce, "rd", count)
	require.NoError(t, err)
	red.refill()
	ft.run(t, red.tasks, 1)
	red.check(1)
	rt := ft.eps[0].(*team)
	require.NoError(t, rt.lp.qp.MoveToError())

	red.refill()
	for r, k := range red.tasks {
		require.NoError(t, k.Post(2), "rank %d", r)
	}
	// Rank 1 waits for rank 0's data, which never comes: coll would tell it of rank
	// 0's failure; here quiesce aborts it.
	if !ft.pollUntil(t, pollTimeout, func() bool { _, errs := states(red.tasks); return errs[0] != nil }) {
		t.Fatalf("rank 0's post does not fail: %s", waiting(red.tasks))
	}
	_, errs := states(red.tasks)
	require.ErrorContains(t, errs[0], "local copy through the NIC")
	var ce *verbs.CompletionError
	require.ErrorAs(t, errs[0], &ce, "the flushed completion")
	require.Equal(t, verbs.WCWRFlushErr, ce.Status)
	require.Nil(t, rt.broken, "a local copy's failure breaks no link")
	ft.quiesce(t, red.tasks)

	red, err = newDMReduction(t, ft, collective.Allreduce, "rd", count)
	require.NoError(t, err)
	red.refill()
	ft.run(t, red.tasks, 1)
	red.check(1)
	require.Equal(t, uint64(2), rt.lp.copies, "rank 0 copied by the CPU once its loopback was down")
	require.Equal(t, uint64(3), ft.eps[1].(*team).lp.copies, "rank 1's loopback still works: a copy at each of the three posts")
	ft.quiesce(t, red.tasks)
}

// TestReductionSourceInDMWaitsForItsCopy: more reductions at once than the loopback
// QP holds, so that the source copies of the last ones wait in the loopback's queue:
// what reads the source waits for its copy, and every result is right.
func TestReductionSourceInDMWaitsForItsCopy(t *testing.T) {
	const cnt, count = loopDepth + 4, 64
	ft := newFakeTeamOn(t, openSoftWith(t, driver.Config{SoftDMUncached: true}), 1, nil, true)
	if poolOf(ft).Kind() != dm.KindDM {
		t.Fatalf("soft0's pool is %s memory: the test needs device memory", poolOf(ft).Kind())
	}
	reds := make([]*dmReduction, cnt)
	var all []driver.Task
	for i := range reds {
		var err error
		reds[i], err = newDMReduction(t, ft, collective.Allreduce, "rd", count)
		require.NoError(t, err)
		reds[i].refill()
		all = append(all, reds[i].tasks...)
	}
	for i, red := range reds {
		require.NoError(t, red.tasks[0].Post(1), "reduction %d", i)
	}
	rt := ft.eps[0].(*team)
	require.Len(t, rt.lp.queue, cnt-loopDepth, "the last copies wait for room on the loopback")
	if !ft.pollUntil(t, pollTimeout, func() bool { return allSettled(all) }) {
		t.Fatalf("reductions hang: %s", waiting(all))
	}
	for i, red := range reds {
		_, errs := states(red.tasks)
		require.NoError(t, errs[0], "reduction %d", i)
		red.check(1)
	}
	for _, red := range reds {
		ft.quiesce(t, red.tasks)
	}
}
