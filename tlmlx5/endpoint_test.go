package tlmlx5

import (
	"bytes"
	gocontext "context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestSendCtl: control messages from every rank to every other arrive at the
// receiver's Handler byte for byte, in per-peer FIFO order, with nothing extra, far
// beyond the receive slots and the send queue (credit and queueing); sizes run from 0
// to MaxCtl.
func TestSendCtl(t *testing.T) {
	rnd := testutil.Rand(t)
	const n, perPeer = 4, 150
	ft := newFakeTeam(t, n, nil)
	maxCtl := ft.eps[0].MaxCtl()
	require.Positive(t, maxCtl)
	var sent [n][n][][]byte
	total := 0
	for i := 0; i < perPeer; {
		// A random batch between polls: some queue behind full send queues.
		batch := 1 + rnd.IntN(80)
		for ; batch > 0 && i < perPeer; batch, i = batch-1, i+1 {
			for from := 0; from < n; from++ {
				for to := 0; to < n; to++ {
					if to == from {
						continue
					}
					size := rnd.IntN(maxCtl + 1)
					switch i {
					case 0:
						size = 0
					case 1:
						size = maxCtl
					}
					msg := make([]byte, size)
					testutil.Fill(rnd, msg)
					require.NoError(t, ft.eps[from].SendCtl(to, msg), "SendCtl %d -> %d #%d", from, to, i)
					sent[from][to] = append(sent[from][to], msg)
					total++
				}
			}
		}
		ft.poll(t)
	}
	received := func() int {
		got := 0
		for to := range ft.hs {
			for from := range ft.hs[to].from {
				got += len(ft.hs[to].from[from])
			}
		}
		return got
	}
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return received() >= total }),
		"%d of %d control messages arrived", received(), total)
	for i := 0; i < 200; i++ { // nothing more may come
		ft.poll(t)
	}
	for to := 0; to < n; to++ {
		require.Empty(t, ft.hs[to].from[to], "rank %d got messages from itself", to)
		for from := 0; from < n; from++ {
			if from == to {
				continue
			}
			got := ft.hs[to].from[from]
			require.Len(t, got, perPeer, "%d -> %d", from, to)
			for i := range got {
				if !bytes.Equal(sent[from][to][i], got[i]) {
					t.Fatalf("%d -> %d: message %d of %d bytes arrived as %d bytes %x...: order or content differs",
						from, to, i, len(sent[from][to][i]), len(got[i]), got[i][:min(8, len(got[i]))])
				}
			}
		}
	}
	for _, ep := range ft.eps {
		require.NoError(t, ep.Broken())
	}
}

// TestSendCtlRefused: a message over MaxCtl, and peers out of range, are refused with
// ErrInvalid; a rank does not send to itself; nothing refused is delivered.
func TestSendCtlRefused(t *testing.T) {
	const n = 3
	ft := newFakeTeam(t, n, nil)
	ep := ft.eps[1]
	require.ErrorIs(t, ep.SendCtl(0, make([]byte, ep.MaxCtl()+1)), driver.ErrInvalid)
	require.ErrorIs(t, ep.SendCtl(2, make([]byte, 4096)), driver.ErrInvalid)
	require.ErrorIs(t, ep.SendCtl(-1, []byte("x")), driver.ErrInvalid)
	require.ErrorIs(t, ep.SendCtl(n, []byte("x")), driver.ErrInvalid)
	require.Error(t, ep.SendCtl(1, []byte("self")))
	require.True(t, ep.PeerDown(-1))
	require.True(t, ep.PeerDown(n))
	require.False(t, ep.PeerDown(0))
	require.NoError(t, ep.SendCtl(0, []byte("ok")))
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return len(ft.hs[0].from[1]) == 1 }))
	for i := 0; i < 100; i++ {
		ft.poll(t)
	}
	require.Equal(t, [][]byte{[]byte("ok")}, ft.hs[0].from[1])
	for r := range ft.hs {
		for p := range ft.hs[r].from {
			if r != 0 || p != 1 {
				require.Empty(t, ft.hs[r].from[p], "rank %d from %d", r, p)
			}
		}
	}
	for _, ep := range ft.eps {
		require.NoError(t, ep.Broken())
	}
}

// plainCase is a case of n ranks built by hand (no v-layouts).
func plainCase(c collective.Type, alg string, n, root, count int, dt collective.DType, op collective.Op) *collCase {
	return &collCase{c: c, alg: alg, n: n, root: root, count: count, dt: dt, op: op,
		srcDispls: make([][]int, n), dstDispls: make([][]int, n)}
}

func stashLen(ep driver.Endpoint) int {
	n := 0
	for _, ms := range ep.(*team).stash {
		n += len(ms)
	}
	return n
}

// TestReadyBeforeNewTask: ranks create and post their tasks one after the other, with
// the team polled in between, so that ready-to-receives reach ranks that have no task
// for the sequence number yet; those ranks keep them (the stash) and their tasks still
// complete, with the right data, over three posts. Every message is above the eager
// maximum, so it goes by ready-to-receive (TestEagerBeforeNewTask has the small ones).
func TestReadyBeforeNewTask(t *testing.T) {
	const n = 4
	big := eagerMaxFor(n) + 8
	aheadOfTask(t, n, stashLen, "ready-to-receive", []*collCase{
		plainCase(collective.Allgather, "ring", n, 0, big/4, collective.Int32, 0),
		plainCase(collective.Alltoall, "pairwise", n, 0, big/2, collective.Uint16, 0),
		plainCase(collective.Gather, "knomial:2", n, 1, big/8, collective.Int64, 0),
		plainCase(collective.Reduce, "knomial", n, 2, big/4, collective.Int32, collective.OpSum),
		plainCase(collective.Allreduce, "ring", n, 0, n*big, collective.Uint8, collective.OpBxor),
		plainCase(collective.Bcast, "chain", n, 3, big/8, collective.Float64, 0),
	})
}

// earlyLen counts the eager headers a rank keeps for receives not started.
func earlyLen(ep driver.Endpoint) int { return len(ep.(*team).early) }

// TestEagerBeforeNewTask: as TestReadyBeforeNewTask, with messages at most the eager
// maximum: their data reaches ranks that have no task (or no post) for it yet, is kept
// in the ring with its header, and is taken by the right post.
func TestEagerBeforeNewTask(t *testing.T) {
	const n = 4
	ft := aheadOfTask(t, n, earlyLen, "eager message", []*collCase{
		plainCase(collective.Allgather, "ring", n, 0, 301, collective.Int32, 0),
		plainCase(collective.Alltoall, "pairwise", n, 0, 33, collective.Uint16, 0),
		plainCase(collective.Gather, "knomial:2", n, 1, 17, collective.Int64, 0),
		plainCase(collective.Reduce, "knomial", n, 2, 1000, collective.Int32, collective.OpSum),
		plainCase(collective.Allreduce, "ring", n, 0, 999, collective.Uint8, collective.OpBxor),
		plainCase(collective.Bcast, "chain", n, 3, eagerMaxFor(n)/8, collective.Float64, 0),
	})
	for r, ep := range ft.eps {
		for p, pe := range ep.(*team).peers {
			if pe == nil {
				continue
			}
			for s, held := range pe.eager.held {
				require.False(t, held, "rank %d still holds slot %d of rank %d's ring", r, s, p)
			}
		}
	}
}

// aheadOfTask runs cases with ranks posting in reverse order and polling in between;
// kept says how many messages a rank keeps for tasks or posts it has not reached.
func aheadOfTask(t *testing.T, n int, kept func(driver.Endpoint) int, what string, cases []*collCase) *fakeTeam {
	rnd := testutil.Rand(t)
	ft := newFakeTeam(t, n, nil)
	for _, cs := range cases {
		runs := cs.build(t, ft.newSeq())
		tasks := make([]driver.Task, n)
		stashed := 0
		for post := uint32(1); post <= 3; post++ {
			in := fill(rnd, runs)
			want := cs.expect(t, runs, in)
			// Post in reverse rank order so that rooted and ring algorithms both
			// see receivers ahead of their senders.
			for r := n - 1; r >= 0; r-- {
				if tasks[r] == nil {
					k, err := ft.newTask(r, &runs[r].spec)
					require.NoError(t, err, "%v rank %d", cs, r)
					tasks[r] = k
				}
				require.NoError(t, tasks[r].Post(post))
				for i := 0; i < 50; i++ {
					ft.poll(t)
					for _, ep := range ft.eps {
						stashed = max(stashed, kept(ep))
					}
				}
			}
			require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }), "%v hangs: %s", cs, waiting(tasks))
			_, errs := states(tasks)
			for r, err := range errs {
				require.NoError(t, err, "%v rank %d", cs, r)
			}
			check(t, cs.String(), runs, want)
		}
		require.Positive(t, stashed, "%v: no %s arrived ahead of its task", cs, what)
		for r, ep := range ft.eps {
			require.Zero(t, kept(ep), "rank %d keeps %ss of tasks that exist", r, what)
		}
		ft.quiesce(t, tasks)
	}
	return ft
}

// TestStaleReadyDropped: a ready-to-receive for a sequence number below the receiver's
// NextSeq that has no task is dropped, not kept; one at or above NextSeq is kept until
// its task comes, and NewTask drops what is kept for sequence numbers below its own.
func TestStaleReadyDropped(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newFakeTeam(t, n, nil)
	// Rank 0 gathers from rank 1: its task sends rank 1 a ready-to-receive at post.
	gather := func(seq uint64) ([]*rankRun, *collCase) {
		cs := plainCase(collective.Gather, "linear", n, 0, eagerMaxFor(n)+1, collective.Uint8, 0)
		return cs.build(t, seq), cs
	}
	settle := func() {
		// The ready-to-receive is sent once rank 0's send queue is empty again;
		// then rank 1 has read it once it polled a few more times.
		require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
			pe := ft.eps[0].(*team).peers[1]
			return pe.posted == 0 && pe.queue.len() == 0
		}))
		for i := 0; i < 100; i++ {
			ft.poll(t)
		}
	}

	// Rank 1 is already past seq 5 (coll numbered it and moved on): stale.
	staleRuns, _ := gather(5)
	ft.next[1] = 7
	stale, err := ft.newTask(0, &staleRuns[0].spec)
	require.NoError(t, err)
	fill(rnd, staleRuns)
	require.NoError(t, stale.Post(1))
	settle()
	require.Zero(t, stashLen(ft.eps[1]), "a stale ready-to-receive is kept")

	// Seq 8 is ahead of rank 1: kept, and its task completes from it.
	runs, cs := gather(8)
	tasks := make([]driver.Task, n)
	tasks[0], err = ft.newTask(0, &runs[0].spec)
	require.NoError(t, err)
	in := fill(rnd, runs)
	want := cs.expect(t, runs, in)
	require.NoError(t, tasks[0].Post(1))
	settle()
	require.Equal(t, 1, stashLen(ft.eps[1]))
	require.Len(t, ft.eps[1].(*team).stash[8], 1)
	tasks[1], err = ft.newTask(1, &runs[1].spec)
	require.NoError(t, err)
	require.Zero(t, stashLen(ft.eps[1]))
	require.NoError(t, tasks[1].Post(1))
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }), waiting(tasks))
	_, errs := states(tasks)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	check(t, "gather from the stash", runs, want)
	done, err := stale.State()
	require.NoError(t, err)
	require.False(t, done, "the stale task's data never came")
	ft.quiesce(t, []driver.Task{stale})
	ft.quiesce(t, tasks)

	// Kept for seq 10, then rank 1 creates seq 11 (coll skipped 10): dropped.
	skipped, _ := gather(10)
	k10, err := ft.newTask(0, &skipped[0].spec)
	require.NoError(t, err)
	require.NoError(t, k10.Post(1))
	settle()
	require.Equal(t, 1, stashLen(ft.eps[1]))
	later, _ := gather(11)
	k11, err := ft.newTask(1, &later[1].spec)
	require.NoError(t, err)
	require.Zero(t, stashLen(ft.eps[1]), "NewTask keeps ready-to-receives of sequence numbers below its own")
	ft.quiesce(t, []driver.Task{k10, k11})
}

// TestSeqCollision: NewTask refuses a sequence number that shares its low 16 bits (the
// immediate's) with an open task's, with ErrBusy and nothing allocated, and takes it
// once that task is closed.
func TestSeqCollision(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newFakeTeam(t, n, nil)
	cs := plainCase(collective.Allreduce, "rd", n, 0, 100, collective.Int32, collective.OpSum)
	const s = 3
	runs := cs.build(t, s)
	tasks := make([]driver.Task, n)
	for r := range tasks {
		k, err := ft.newTask(r, &runs[r].spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	mrs, bufs := verbs.LiveObjects()["mr"], mem.Live()
	for _, seq := range []uint64{s, s + SeqWindow, s + 5*SeqWindow} {
		again := cs.build(t, seq)
		_, err := ft.newTask(0, &again[0].spec)
		require.ErrorIs(t, err, driver.ErrBusy, "seq %d", seq)
	}
	require.Equal(t, mrs, verbs.LiveObjects()["mr"], "a refused NewTask registers nothing")
	require.Equal(t, bufs, mem.Live(), "a refused NewTask allocates nothing")
	// Another sequence number is fine while s is open.
	other := cs.build(t, s+1)
	k, err := ft.newTask(0, &other[0].spec)
	require.NoError(t, err)
	require.NoError(t, k.Close())

	closeTasks(t, tasks)
	runs = cs.build(t, s+SeqWindow)
	for r := range tasks {
		k, err := ft.newTask(r, &runs[r].spec)
		require.NoError(t, err, "the old task is closed")
		tasks[r] = k
	}
	in := fill(rnd, runs)
	want := cs.expect(t, runs, in)
	ft.run(t, tasks, 1)
	check(t, "after the collision", runs, want)
	ft.quiesce(t, tasks)
}

// TestCutOff: cutting a peer off marks it down and breaks the team; control messages
// to it are refused, the other peers still work, and the cut-off peer's own sends to
// this rank fail so that it sees this rank down too.
func TestCutOff(t *testing.T) {
	const n = 3
	ft := newFakeTeam(t, n, nil)
	ep0 := ft.eps[0]
	require.NoError(t, ep0.Broken())
	ep0.CutOff(1, "test cut-off")
	ep0.CutOff(1, "again") // idempotent
	ep0.CutOff(-1, "out of range")
	ep0.CutOff(n, "out of range")
	require.True(t, ep0.PeerDown(1))
	require.False(t, ep0.PeerDown(2))
	require.Error(t, ep0.Broken())
	require.ErrorContains(t, ep0.Broken(), "test cut-off")
	require.Error(t, ep0.SendCtl(1, []byte("to the cut-off peer")))

	require.NoError(t, ep0.SendCtl(2, []byte("still here")))
	require.NoError(t, ft.eps[1].SendCtl(0, []byte("cut off")))
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
		return len(ft.hs[2].from[0]) == 1 && ft.eps[1].PeerDown(0)
	}), "rank 2 got %d messages; rank 1 sees rank 0 down: %v", len(ft.hs[2].from[0]), ft.eps[1].PeerDown(0))
	require.Error(t, ft.eps[1].Broken())
	require.Empty(t, ft.hs[0].from[1], "a cut-off peer's message arrived")
	require.NoError(t, ft.eps[2].Broken())
}

// TestBreakLink: BreakLink on a task breaks the link it uses, as a failing NIC would:
// the team is broken, the peer is down and refused, the peer finds out when it sends,
// and the next post does not complete; its tasks still quiesce and close.
func TestBreakLink(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newFakeTeam(t, n, nil)
	cs := plainCase(collective.Allreduce, "rd", n, 0, 256, collective.Int64, collective.OpMax)
	runs := cs.build(t, ft.newSeq())
	tasks := make([]driver.Task, n)
	for r := range tasks {
		k, err := ft.newTask(r, &runs[r].spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	want := cs.expect(t, runs, fill(rnd, runs))
	ft.run(t, tasks, 1)
	check(t, "before the break", runs, want)

	require.NoError(t, tasks[0].BreakLink())
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return ft.eps[0].Broken() != nil }))
	require.True(t, ft.eps[0].PeerDown(1))
	require.Error(t, ft.eps[0].SendCtl(1, []byte("x")))

	fill(rnd, runs)
	for r := range tasks {
		require.NoError(t, tasks[r].Post(2))
	}
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return ft.eps[1].Broken() != nil }),
		"rank 1 does not notice that its peer's link broke")
	require.True(t, ft.eps[1].PeerDown(0))
	for i := 0; i < 200; i++ {
		ft.poll(t)
	}
	done, _ := states(tasks)
	require.Equal(t, []bool{false, false}, done, "a post over a broken link completed")
	ft.quiesce(t, tasks)
}

// TestNewTaskFaults: an injected failure of the transport's scratch allocations
// (fault.Alloc) or registrations (fault.Reg, user buffers and scratch alike) makes
// NewTask fail cleanly: the error wraps fault.ErrInjected, every buffer and
// registration of the failed task is released, the sequence number's routing is not
// taken, and the team goes on working.
func TestNewTaskFaults(t *testing.T) {
	rnd := testutil.Rand(t)
	const n, faulty = 4, 2
	// Rank 2 of an allreduce rd on 4 ranks registers its two buffers and allocates
	// and registers two scratch buffers: Reg #1-#4 and Alloc #1-#2 each hit a
	// different step.
	for _, f := range []fault.Fault{
		{Kind: fault.Alloc, Rank: faulty, N: 1}, {Kind: fault.Alloc, Rank: faulty, N: 2},
		{Kind: fault.Reg, Rank: faulty, N: 1}, {Kind: fault.Reg, Rank: faulty, N: 2},
		{Kind: fault.Reg, Rank: faulty, N: 3}, {Kind: fault.Reg, Rank: faulty, N: 4},
	} {
		t.Run(f.String(), func(t *testing.T) {
			ft := newFakeTeam(t, n, func(r int) *fault.Set { return fault.NewSet([]fault.Fault{f}, r) })
			cs := plainCase(collective.Allreduce, "rd", n, 0, 2001, collective.Int32, collective.OpSum)
			runs := cs.build(t, ft.newSeq())
			tasks := make([]driver.Task, n)
			bufs := mem.Live()
			var failed error
			for r := range tasks {
				k, err := ft.newTask(r, &runs[r].spec)
				if r == faulty {
					failed = err
					require.Nil(t, k)
					continue
				}
				require.NoError(t, err, "rank %d", r)
				tasks[r] = k
			}
			require.ErrorIs(t, failed, fault.ErrInjected)
			require.Equal(t, bufs, mem.Live()-countScratch(tasks), "the failed task's scratch is freed")
			require.Empty(t, ft.eps[faulty].(*team).tasks)
			require.Empty(t, ft.eps[faulty].(*team).bySeq)
			closeTasks(t, tasks)
			require.Equal(t, bufs, mem.Live())

			// The retry reuses the failed sequence number's routing key: it would
			// be refused if the failed task had kept its routing.
			runs = cs.build(t, runs[0].spec.Seq+SeqWindow)
			for r := range tasks {
				k, err := ft.newTask(r, &runs[r].spec)
				require.NoError(t, err, "rank %d: the fault fires once", r)
				tasks[r] = k
			}
			for post := uint32(1); post <= 2; post++ {
				want := cs.expect(t, runs, fill(rnd, runs))
				ft.run(t, tasks, post)
				check(t, "after the fault", runs, want)
			}
			ft.quiesce(t, tasks)
			ft.close(t)
			require.NoError(t, verbs.CheckLeaks())
			require.Zero(t, mem.Live())
		})
	}
}

// countScratch is the mem buffers the tasks own (the transport's scratch).
func countScratch(tasks []driver.Task) int {
	c := 0
	for _, k := range tasks {
		if k == nil {
			continue
		}
		for _, b := range k.(*task).bufs {
			if b.own != nil {
				c++
			}
		}
	}
	return c
}

// TestConcurrentTasks: many collectives of one team in flight at once, the ranks
// creating and posting them at their own pace with the team polled in between (and
// posting them again in each rank's own random order): data routes by sequence number
// and tag to the right task, ready-to-receives of tasks not created yet wait in the
// stash, and every result is right, over three posts.
func TestConcurrentTasks(t *testing.T) {
	rnd := testutil.Rand(t)
	const n, k = 4, 10
	ft := newFakeTeam(t, n, nil)
	types := collective.Types()
	var cases []*collCase
	var runs [][]*rankRun
	for len(cases) < k {
		c := types[rnd.IntN(len(types))]
		algs := Algorithms(c)
		alg := algs[rnd.IntN(len(algs))]
		if Fits(c, alg, n) != nil {
			continue
		}
		ip := collective.Describe(c).InPlace && rnd.IntN(2) == 0
		cs := newCase(rnd, c, alg, n, rnd.IntN(n), 1+rnd.IntN(300), ip)
		cases = append(cases, cs)
		runs = append(runs, cs.build(t, ft.newSeq()))
	}
	tasks := make([][]driver.Task, k)
	for i := range tasks {
		tasks[i] = make([]driver.Task, n)
	}
	defer func() {
		for i := range tasks {
			ft.quiesce(t, tasks[i])
		}
	}()
	for post := uint32(1); post <= 3; post++ {
		want := make([][][2][]byte, k)
		for i, cs := range cases {
			want[i] = cs.expect(t, runs[i], fill(rnd, runs[i]))
		}
		// Each rank's own order; a step is one rank taking its next collective.
		// Tasks are created in sequence order, as coll's Init numbers them; the
		// later posts go in any order.
		orders := make([][]int, n)
		for r := range orders {
			orders[r] = rnd.Perm(k)
			if post == 1 {
				for i := range orders[r] {
					orders[r][i] = i
				}
			}
		}
		for left := n * k; left > 0; left-- {
			r := rnd.IntN(n)
			for len(orders[r]) == 0 {
				r = (r + 1) % n
			}
			i := orders[r][0]
			orders[r] = orders[r][1:]
			if tasks[i][r] == nil {
				task, err := ft.newTask(r, &runs[i][r].spec)
				require.NoError(t, err, "%v rank %d", cases[i], r)
				tasks[i][r] = task
			}
			require.NoError(t, tasks[i][r].Post(post), "%v rank %d", cases[i], r)
			for j := rnd.IntN(4); j > 0; j-- {
				ft.poll(t)
			}
		}
		require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
			for i := range tasks {
				if !allSettled(tasks[i]) {
					return false
				}
			}
			return true
		}), "concurrent collectives hang: %s", func() string {
			var b bytes.Buffer
			for i := range tasks {
				if !allSettled(tasks[i]) {
					fmt.Fprintf(&b, "\n%v #%d: %s", cases[i], runs[i][0].spec.Seq, waiting(tasks[i]))
				}
			}
			return b.String()
		}())
		for i := range tasks {
			_, errs := states(tasks[i])
			for r, err := range errs {
				require.NoError(t, err, "%v rank %d", cases[i], r)
			}
			check(t, fmt.Sprintf("%v post %d", cases[i], post), runs[i], want[i])
		}
	}
}

// TestLargeBcastChain: a bcast longer than the chain's window of chunks pipelines
// through it.
func TestLargeBcastChain(t *testing.T) {
	rnd := testutil.Rand(t)
	ft := newFakeTeam(t, 3, nil)
	count := (chainWindow + 5) * chainChunk / 8
	cs := plainCase(collective.Bcast, "chain", 3, 1, count+3, collective.Uint64, 0)
	runCase(t, ft, rnd, cs)
}

// TestLifecycle: closing in the wrong order is refused with ErrBusy, a closed
// context takes no endpoint, Register takes host memory only, and WaitEvent ends
// with its context.
func TestLifecycle(t *testing.T) {
	ctx := openSoft(t)
	ep, addr, err := ctx.NewEndpoint(driver.TeamParams{Rank: 0, Size: 1, NextSeq: func() uint64 { return 0 }})
	require.NoError(t, err)
	require.NoError(t, ep.Connect([][]byte{addr}))
	require.ErrorIs(t, ep.Connect(nil), driver.ErrInvalid)
	require.ErrorIs(t, ctx.Close(), driver.ErrBusy)

	rr := newRankRun(t, 1, collective.Allreduce, collective.Int8, collective.OpSum, "",
		collective.Args{Rank: 0, Size: 1, Src: collective.Buf{Count: 32}, Dst: collective.Buf{Count: 32}})
	k, err := ep.NewTask(&rr.spec)
	require.NoError(t, err)
	require.ErrorIs(t, ep.Close(), driver.ErrBusy)
	require.NoError(t, k.Post(1))
	done, err := k.State()
	require.NoError(t, err)
	require.True(t, done, "a team of one completes at Post")
	require.Equal(t, rr.src.b[:32], rr.dst.b[:32])
	require.NoError(t, k.Close())

	_, err = ep.Register(nil)
	require.ErrorIs(t, err, driver.ErrNotSupported)
	mb, err := mem.Alloc(mem.Host, 4096)
	require.NoError(t, err)
	c, err := ep.Register(mb)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, mb.Close())

	wctx, cancel := gocontext.WithTimeout(gocontext.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, ep.WaitEvent(wctx), gocontext.DeadlineExceeded)

	require.NoError(t, ep.Close())
	require.NoError(t, ep.Close(), "Close is idempotent")
	require.NoError(t, ctx.Close())
	_, _, err = ctx.NewEndpoint(driver.TeamParams{Rank: 0, Size: 1, NextSeq: func() uint64 { return 0 }})
	require.ErrorIs(t, err, driver.ErrClosed)
}

// TestAbortRepost: a post that one rank aborts right away does not complete; once
// every rank aborted and the team is quiet (every endpoint polled after the last
// outstanding write, as coll's quiescence agreement guarantees), the same tasks post
// again and complete with the new data: nothing of the aborted post leaks into it.
func TestAbortRepost(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 4
	ft := newFakeTeam(t, n, nil)
	for _, cs := range []*collCase{
		plainCase(collective.Allreduce, "ring", n, 0, 1000, collective.Int32, collective.OpSum),
		plainCase(collective.Alltoall, "pairwise", n, 0, 100, collective.Uint8, 0),
		plainCase(collective.Bcast, "knomial", n, 2, 3000, collective.Int64, 0),
	} {
		runs := cs.build(t, ft.newSeq())
		tasks := make([]driver.Task, n)
		for r := range tasks {
			k, err := ft.newTask(r, &runs[r].spec)
			require.NoError(t, err)
			tasks[r] = k
		}
		fill(rnd, runs)
		for r, k := range tasks {
			require.NoError(t, k.Post(1))
			if r == 1 {
				k.Abort()
			}
		}
		ft.pollUntil(t, 50*time.Millisecond, func() bool { return allSettled(tasks) })
		for _, k := range tasks {
			k.Abort()
		}
		require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
			for _, k := range tasks {
				if !k.Quiesced() {
					return false
				}
			}
			return true
		}))
		for i := 0; i < 10; i++ {
			ft.poll(t)
		}
		for post := uint32(2); post <= 3; post++ {
			want := cs.expect(t, runs, fill(rnd, runs))
			ft.run(t, tasks, post)
			check(t, fmt.Sprintf("%v post %d after an abort", cs, post), runs, want)
		}
		ft.quiesce(t, tasks)
	}
}
