package tlmlx5

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// initAll creates every rank's non-persistent task for runs at seq.
func (ft *fakeTeam) initAll(t testing.TB, runs []*rankRun, seq uint64) []driver.Task {
	tasks := make([]driver.Task, len(runs))
	for r, rr := range runs {
		rr.spec.Seq, rr.spec.Persistent = seq, false
		k, err := ft.newTask(r, &rr.spec)
		require.NoError(t, err, "rank %d", r)
		tasks[r] = k
	}
	return tasks
}

// TestTaskCache: a non-persistent collective initialized again with the same shape and
// buffers takes the task the last one closed (same graph, registrations, scratch),
// data-checked with fresh data each time; other buffers or another shape build anew;
// a repeated Init + Post + Close allocates nothing in the transport.
func TestTaskCache(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 3
	ft := newFakeTeam(t, n, nil)
	ft.warm(t)
	for _, cs := range []*collCase{
		plainCase(collective.Gather, "linear", n, 1, 100, collective.Uint8, 0),
		plainCase(collective.Allreduce, "rd", n, 0, 3000, collective.Int32, collective.OpSum),
		plainCase(collective.Reduce, "knomial", n, 2, 50, collective.Int64, collective.OpMax),
		newCase(rnd, collective.Alltoallv, "", n, 0, 40, false),
		plainCase(collective.Bcast, "", n, 2, eagerMaxFor(n)+5, collective.Uint8, 0),
	} {
		t.Run(cs.String(), func(t *testing.T) {
			runs := cs.build(t, 0)
			var last []driver.Task
			for i := 0; i < 4; i++ {
				want := cs.expect(t, runs, fill(rnd, runs))
				tasks := ft.initAll(t, runs, ft.newSeq())
				if i > 0 {
					for r := range tasks {
						require.Same(t, last[r], tasks[r], "Init %d rank %d: the closed task is not reused", i, r)
					}
				}
				ft.run(t, tasks, 1)
				check(t, fmt.Sprintf("Init %d", i), runs, want)
				closeTasks(t, append([]driver.Task(nil), tasks...))
				last = tasks
			}
			// Other buffers: a new task.
			other := cs.build(t, 0)
			want := cs.expect(t, other, fill(rnd, other))
			tasks := ft.initAll(t, other, ft.newSeq())
			for r := range tasks {
				require.NotSame(t, last[r], tasks[r], "rank %d reuses a task of other buffers", r)
			}
			ft.run(t, tasks, 1)
			check(t, "other buffers", other, want)
			closeTasks(t, tasks)

			tasks = make([]driver.Task, n)
			allocs := testing.AllocsPerRun(20, func() {
				seq := ft.newSeq()
				for r, rr := range runs {
					rr.spec.Seq = seq
					tasks[r], _ = ft.newTask(r, &rr.spec)
				}
				for _, k := range tasks {
					_ = k.Post(1)
				}
				for i := 0; i < maxPollRounds; i++ {
					done := true
					for r, ep := range ft.eps {
						_ = ep.Poll(ft.hs[r])
						d, err := tasks[r].State()
						done = done && (d || err != nil)
					}
					if done {
						break
					}
				}
				for _, k := range tasks {
					_ = k.Close()
				}
			})
			t.Logf("%v allocations per Init + Post + Close of every rank", allocs)
			require.Zero(t, allocs, "a repeated Init allocates")
		})
	}
}

// TestTaskCacheFaults: a reused task counts its scratch's allocation and registration
// in the fault set as a build does: an injected fault at the second Init fires there.
func TestTaskCacheFaults(t *testing.T) {
	for _, kind := range []fault.Kind{fault.Alloc, fault.Reg} {
		t.Run(kind.String(), func(t *testing.T) {
			const n = 2
			// Rank 0 of an allreduce rd on 2 ranks allocates and registers one
			// scratch buffer per build (its user buffers stay registered).
			f := fault.Fault{Kind: kind, Rank: 0, N: 2}
			if kind == fault.Reg {
				f.N = 4 // Src, Dst, scratch; then the reuse's scratch
			}
			ft := newFakeTeam(t, n, func(r int) *fault.Set { return fault.NewSet([]fault.Fault{f}, r) })
			cs := plainCase(collective.Allreduce, "rd", n, 0, 64, collective.Int32, collective.OpSum)
			runs := cs.build(t, 0)
			tasks := ft.initAll(t, runs, ft.newSeq())
			ft.run(t, tasks, 1)
			closeTasks(t, tasks)
			runs[0].spec.Seq, runs[0].spec.Persistent = ft.newSeq(), false
			k, err := ft.newTask(0, &runs[0].spec)
			require.ErrorIs(t, err, fault.ErrInjected, "the second Init's fault does not fire")
			require.Nil(t, k)
			require.Empty(t, ft.eps[0].(*team).cached, "the failed reuse's task is kept")
			k, err = ft.newTask(0, &runs[0].spec)
			require.NoError(t, err, "the fault fires once")
			runs[1].spec.Seq, runs[1].spec.Persistent = runs[0].spec.Seq, false
			k1, err := ft.newTask(1, &runs[1].spec)
			require.NoError(t, err)
			ft.quiesce(t, []driver.Task{k, k1})
		})
	}
}

// TestTaskCacheQueuedSends: a task that closes with sends still queued behind a full
// send queue (its post aborted) is kept; its next life, posted with the same post
// number, must not send those stale writes (they name the last life's
// ready-to-receive): they are dropped, and the new post's data arrives alone.
func TestTaskCacheQueuedSends(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newFakeTeam(t, n, nil)
	ft.warm(t)
	cs := plainCase(collective.Gather, "linear", n, 0, eagerMaxFor(n)+100, collective.Uint8, 0)
	runs := cs.build(t, 0)
	tasks := ft.initAll(t, runs, ft.newSeq())
	fill(rnd, runs)
	require.NoError(t, tasks[0].Post(1)) // the root's ready-to-receive reaches rank 1
	pe := ft.eps[1].(*team).peers[0]
	pe.posted += sqDepth // rank 1's send queue is "full": its write stays queued
	require.NoError(t, tasks[1].Post(1))
	for i := 0; i < 50; i++ {
		require.NoError(t, ft.eps[1].Poll(ft.hs[1]))
		require.NoError(t, ft.eps[0].Poll(ft.hs[0]))
	}
	require.Positive(t, pe.queue.len(), "rank 1's write is not queued")
	for _, k := range tasks {
		k.Abort()
	}
	ft.quiesce(t, tasks)
	pe.posted -= sqDepth
	want := cs.expect(t, runs, fill(rnd, runs))
	again := ft.initAll(t, runs, ft.newSeq())
	for r, err := range ft.post(t, again, 1) {
		require.NoError(t, err, "rank %d", r)
	}
	check(t, "the kept task's next life", runs, want)
	ft.settle(t)
	_, errs := states(again)
	require.NoError(t, errors.Join(errs...), "a stale write reached the root")
	ft.quiesce(t, again)
}

// TestTaskCacheStagingScratch: a gather root whose destination is a staging scratch of
// coll's (a mem.Buffer registered through Register, as coll's scratch cache does) takes
// the closed task again at the next Init that names the same scratch, data-checked
// with fresh data; closing the scratch's registration, which coll does before it frees
// the buffer, releases that kept task first, so the registration goes (no entry left
// for the buffer) before the buffer is freed; the next Init on another scratch builds
// anew.
func TestTaskCacheStagingScratch(t *testing.T) {
	rnd := testutil.Rand(t)
	const n, blk = 3, 3000
	ft := newFakeTeam(t, n, nil)
	ft.warm(t)
	root := ft.eps[0].(*team)
	cs := plainCase(collective.Gather, "linear", n, 0, blk, collective.Uint8, 0)
	runs := cs.build(t, 0)
	newScratch := func() (*mem.Buffer, io.Closer) {
		b, err := mem.Alloc(mem.Host, n*blk)
		require.NoError(t, err)
		reg, err := root.Register(b)
		require.NoError(t, err)
		runs[0].spec.Dst.Slice, runs[0].spec.Dst.Buf, runs[0].spec.Dst.Addr = nil, b, b.Addr()
		return b, reg
	}
	scratch, reg := newScratch()
	var last driver.Task
	for i := 0; i < 3; i++ {
		fill(rnd, runs)
		tasks := ft.initAll(t, runs, ft.newSeq())
		if i > 0 {
			require.Same(t, last, tasks[0], "Init %d: the root's closed task on the same scratch is not reused", i)
		}
		ft.run(t, tasks, 1)
		for r := range n {
			testutil.Equal(t, runs[r].src.b[:blk], scratch.Bytes()[r*blk:(r+1)*blk], fmt.Sprintf("Init %d: block %d", i, r))
		}
		last = tasks[0]
		closeTasks(t, tasks)
	}
	require.Len(t, root.cached, 1, "the root's task on the scratch is kept")
	registered := func(b *mem.Buffer) bool {
		for k := range root.cache.entries {
			if k.buf == b {
				return true
			}
		}
		return false
	}
	require.True(t, registered(scratch), "the kept task's scratch is still registered")
	require.NoError(t, reg.Close())
	require.Empty(t, root.cached, "closing the scratch's registration leaves its kept task")
	require.False(t, registered(scratch), "the scratch stays registered after its registration closed")
	require.NoError(t, scratch.Close())

	other, oreg := newScratch()
	defer func() { require.NoError(t, oreg.Close()); require.NoError(t, other.Close()) }()
	fill(rnd, runs)
	tasks := ft.initAll(t, runs, ft.newSeq())
	require.NotSame(t, last, tasks[0], "a task on another scratch is reused")
	ft.run(t, tasks, 1)
	for r := range n {
		testutil.Equal(t, runs[r].src.b[:blk], other.Bytes()[r*blk:(r+1)*blk], fmt.Sprintf("another scratch: block %d", r))
	}
	closeTasks(t, tasks)
}
