package tlmlx5

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// settle polls every rank a few rounds.
func (ft *fakeTeam) settle(t testing.TB) {
	for i := 0; i < 10; i++ {
		ft.poll(t)
	}
}

// warm runs one alltoall, so that every rank has sent every other one a message, and
// with it its eager ring: the eager path is open between every pair after it.
func (ft *fakeTeam) warm(t testing.TB) {
	cs := plainCase(collective.Alltoall, "pairwise", ft.n, 0, 1, collective.Uint8, 0)
	runs := cs.build(t, ft.newSeq())
	tasks := make([]driver.Task, ft.n)
	for r := range tasks {
		k, err := ft.newTask(r, &runs[r].spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	ft.run(t, tasks, 1)
	ft.quiesce(t, tasks)
	ft.settle(t)
	for r, ep := range ft.eps {
		for p, pe := range ep.(*team).peers {
			require.True(t, pe == nil || pe.eager.known, "rank %d does not know rank %d's ring", r, p)
		}
	}
}

// TestEagerThreshold runs every algorithm of every collective with byte counts right
// at and around the eager maximum, and multiples of it for the algorithms that split
// a vector into per-rank chunks, so that messages of both paths (and both at once)
// are data-checked over three posts with fresh data (with -short, teams of 2 and 8
// and the counts right at and above the maximum).
func TestEagerThreshold(t *testing.T) {
	rnd := testutil.Rand(t)
	sizes := []int{2, 3, 8, 17}
	if testing.Short() { // the rxe VM runs under emulation
		sizes = []int{2, 8}
	}
	for _, n := range sizes {
		ft := newFakeTeam(t, n, nil)
		m := eagerMaxFor(n)
		counts := []int{m - 1, m, m + 1}
		switch {
		case testing.Short():
			counts = []int{m, m + 1, n * (m + 1)}
		case n <= 8:
			counts = append(counts, n*m, n*(m+1))
		}
		for _, c := range collective.Types() {
			if c == collective.Barrier {
				continue
			}
			for _, alg := range algNames(c) {
				if alg != "" && Fits(c, alg, n) != nil {
					continue
				}
				for _, count := range counts {
					cs := newCase(rnd, c, alg, n, rnd.IntN(n), count, false)
					cs.dt = collective.Uint8 // count is bytes
					runCase(t, ft, rnd, cs)
				}
			}
		}
	}
}

// TestEagerCredits: a sender runs far more small collectives than the receiver's
// ring has slots before the receiver creates any of them: the first ones wait in the
// ring, the sender runs out of credits and asks for ready-to-receives for the rest,
// and the receiver, creating them and posting them in reverse order, gets every block
// right; then again, in order, with the credits that came back. No slot stays held.
func TestEagerCredits(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newFakeTeam(t, n, nil)
	ft.warm(t)
	slots := eagerSlotsFor(n)
	colls := 3 * slots
	cases := make([]*collCase, colls)
	runs := make([][]*rankRun, colls)
	tasks := make([][]driver.Task, colls)
	for i := range cases {
		cases[i] = plainCase(collective.Gather, "linear", n, 0, 1+rnd.IntN(eagerMaxFor(n)), collective.Uint8, 0)
		runs[i] = cases[i].build(t, ft.newSeq())
		tasks[i] = make([]driver.Task, n)
	}
	defer func() {
		for _, ks := range tasks {
			ft.quiesce(t, ks)
		}
	}()
	for post := uint32(1); post <= 2; post++ {
		want := make([][][2][]byte, colls)
		for i, cs := range cases {
			want[i] = cs.expect(t, runs[i], fill(rnd, runs[i]))
			if tasks[i][1] == nil {
				k, err := ft.newTask(1, &runs[i][1].spec)
				require.NoError(t, err)
				tasks[i][1] = k
			}
			require.NoError(t, tasks[i][1].Post(post))
		}
		ft.settle(t)
		rts := 0
		for i := range cases {
			for _, o := range tasks[i][1].(*task).ops {
				if o.kind == opSend && o.rts {
					rts++
				}
			}
		}
		if post == 1 {
			require.Positive(t, rts, "the sender never ran out of credits")
			require.Less(t, rts, colls, "no eager write went into the ring")
			require.Positive(t, earlyLen(ft.eps[0]), "nothing is kept for the receiver's tasks")
		}
		t.Logf("post %d: %d of %d sends asked for a ready-to-receive", post, rts, colls)
		for i := range cases { // coll creates its tasks in order
			if tasks[i][0] == nil {
				k, err := ft.newTask(0, &runs[i][0].spec)
				require.NoError(t, err)
				tasks[i][0] = k
			}
		}
		for j := range cases {
			i := j
			if post == 1 {
				i = colls - 1 - j
			}
			require.NoError(t, tasks[i][0].Post(post))
		}
		for i := range cases {
			if !ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks[i]) }) {
				t.Fatalf("collective %d hangs: %s", i, waiting(tasks[i]))
			}
			_, errs := states(tasks[i])
			for r, err := range errs {
				require.NoError(t, err, "collective %d rank %d", i, r)
			}
			check(t, fmt.Sprintf("post %d collective %d", post, i), runs[i], want[i])
		}
	}
	ft.settle(t)
	require.Zero(t, earlyLen(ft.eps[0]))
	recv := ft.eps[0].(*team).peers[1].eager
	send := ft.eps[1].(*team).peers[0].eager
	for s, held := range recv.held {
		require.False(t, held, "slot %d is still held", s)
	}
	require.Equal(t, slots, len(send.free)+len(recv.freed), "every slot is a credit again, or on its way back")
}

// TestEagerStaleDropped: eager data of a sequence number the receiver moved past
// without a task is dropped and its slot freed; data for one ahead is kept until its
// task takes it; an aborted post's data is not taken by the next post.
func TestEagerStaleDropped(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	ft := newFakeTeam(t, n, nil)
	ft.warm(t)
	gather := func(seq uint64) ([]*rankRun, *collCase) {
		cs := plainCase(collective.Gather, "linear", n, 1, 100, collective.Uint8, 0)
		return cs.build(t, seq), cs
	}
	held := func() int {
		c := 0
		for _, h := range ft.eps[1].(*team).peers[0].eager.held {
			if h {
				c++
			}
		}
		return c
	}
	// Rank 1 is past seq 5: stale.
	staleRuns, _ := gather(5)
	ft.next[1] = 7
	stale, err := ft.newTask(0, &staleRuns[0].spec)
	require.NoError(t, err)
	fill(rnd, staleRuns)
	require.NoError(t, stale.Post(1))
	ft.settle(t)
	require.Zero(t, earlyLen(ft.eps[1]), "stale eager data is kept")
	require.Zero(t, held(), "stale eager data holds its slot")
	ft.quiesce(t, []driver.Task{stale})

	// Seq 8 is ahead: kept; its task takes it at post 1. Post 2 is aborted on the
	// receiver before it polls, and post 3 gets its own data.
	runs, cs := gather(8)
	tasks := make([]driver.Task, n)
	defer func() { ft.quiesce(t, tasks) }()
	tasks[0], err = ft.newTask(0, &runs[0].spec)
	require.NoError(t, err)
	want := cs.expect(t, runs, fill(rnd, runs))
	require.NoError(t, tasks[0].Post(1))
	ft.settle(t)
	require.Equal(t, 1, earlyLen(ft.eps[1]))
	require.Equal(t, 1, held())
	tasks[1], err = ft.newTask(1, &runs[1].spec)
	require.NoError(t, err)
	require.NoError(t, tasks[1].Post(1))
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }), waiting(tasks))
	_, errs := states(tasks)
	require.NoError(t, errors.Join(errs...))
	check(t, "gather from the ring", runs, want)
	require.Zero(t, held())

	fill(rnd, runs)
	require.NoError(t, tasks[0].Post(2))
	require.NoError(t, tasks[1].Post(2))
	for i := 0; i < maxPollRounds; i++ { // only the sender polls
		if d, _ := tasks[0].State(); d {
			break
		}
		require.NoError(t, ft.eps[0].Poll(ft.hs[0]))
	}
	d, err := tasks[0].State()
	require.NoError(t, err)
	require.True(t, d, "rank 0's eager send completes")
	tasks[1].Abort()
	want = cs.expect(t, runs, fill(rnd, runs))
	ft.run(t, tasks, 3)
	check(t, "post 3 after an aborted post 2", runs, want)
	ft.settle(t)
	require.Zero(t, held(), "the aborted post's slot is freed")
}

// TestNoWriteBeforePost: the user owns Dst between the end of a post and the next
// Post. Peers that post k+1 early (and are polled for a long while) write nothing
// into a rank's Dst before that rank posts k+1: not by the eager path (the data waits
// in the ring) and not by the rendezvous path (no ready-to-receive for k+1 goes out
// before the Post). Then the late rank posts, and every rank gets post k+1's data.
func TestNoWriteBeforePost(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, n := range []int{2, 3} {
		m := eagerMaxFor(n)
		for _, cs := range []*collCase{
			plainCase(collective.Gather, "linear", n, 0, 64, collective.Uint8, 0),
			plainCase(collective.Gather, "linear", n, 0, m+64, collective.Uint8, 0),
			plainCase(collective.Allgather, "ring", n, 0, 100, collective.Uint32, 0),
			plainCase(collective.Allgather, "ring", n, 0, m/4+100, collective.Uint32, 0),
			plainCase(collective.Allreduce, "rd", n, 0, 60, collective.Int64, collective.OpSum),
			plainCase(collective.Bcast, "knomial", n, 0, m+8, collective.Uint8, 0),
		} {
			t.Run(cs.String(), func(t *testing.T) {
				ft := newFakeTeam(t, n, nil)
				ft.warm(t)
				runs := cs.build(t, ft.newSeq())
				tasks := make([]driver.Task, n)
				defer func() { ft.quiesce(t, tasks) }()
				for r := range tasks {
					k, err := ft.newTask(r, &runs[r].spec)
					require.NoError(t, err)
					tasks[r] = k
				}
				want := cs.expect(t, runs, fill(rnd, runs))
				ft.run(t, tasks, 1)
				check(t, "post 1", runs, want)
				for post := uint32(2); post <= 3; post++ {
					// Every rank writes fresh data into its buffers (the user's, between
					// posts); rank 0 stays behind, the others post and are polled.
					in := fill(rnd, runs)
					want := cs.expect(t, runs, in)
					out := func() []byte { // rank 0's output buffer
						if cs.c == collective.Bcast {
							return runs[0].src.b
						}
						return runs[0].dst.b
					}
					before := bytes.Clone(out())
					for r := 1; r < n; r++ {
						require.NoError(t, tasks[r].Post(post))
					}
					for i := 0; i < 2000; i++ {
						ft.poll(t)
					}
					testutil.Equal(t, before, out(), fmt.Sprintf("post %d: rank 0's buffer changed before it posted", post))
					require.NoError(t, tasks[0].Post(post))
					ft.finish(t, tasks, post, runs, want)
				}
			})
		}
	}
}

// TestEagerZeroHeaderOutlivesTask: a zero-byte block at first contact, before the
// link is up for sends on the receiver's side. Here rank 0's link to 1 can receive
// (connected) but not send (1's last hello is held back). The hour soak found the
// case: a 5-rank alltoall of count 0 with eager closes, where rank 0 took rank 1's
// block, finished and closed its task while its own zero-byte header to rank 1 still
// queued, and a header tied to the task went with it (the peer waited out its
// deadline). A zero-byte send then went slotless and done at once, untied from its
// task. Since session 46 it holds a credit like any message (TestEagerZeroRunAhead),
// and without one (here: no ring known yet) it is a rendezvous request: rank 0 must
// answer it, so it cannot finish while its link cannot send; once the link is up both
// finish, and a task closed and kept for reuse right away takes nothing back.
func TestEagerZeroHeaderOutlivesTask(t *testing.T) {
	const n = 2
	ft := newFakeTeam(t, n, nil)
	ft.msgs.hold = func(from, to int, msg []byte) bool {
		return from == 1 && to == 0 && len(msg) > 1 && msg[0] == msgHello && msg[1]&helloRTR != 0
	}
	cs := plainCase(collective.Alltoall, "", n, 0, 0, collective.Uint8, 0)
	runs := cs.build(t, ft.newSeq())
	for _, r := range runs {
		r.spec.Persistent = false // a task that closes is kept for reuse
	}
	tasks := make([]driver.Task, n)
	k1, err := ft.newTask(1, &runs[1].spec)
	require.NoError(t, err)
	tasks[1] = k1
	require.NoError(t, k1.Post(1))
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return len(ft.msgs.held) > 0 }),
		"rank 1 never got to its last hello")
	k0, err := ft.newTask(0, &runs[0].spec)
	require.NoError(t, err)
	tasks[0] = k0
	require.NoError(t, k0.Post(1))
	require.False(t, ft.pollUntil(t, 200*time.Millisecond, func() bool { d, err := k0.State(); return d || err != nil }),
		"rank 0 finished without answering rank 1's rendezvous request")
	require.Equal(t, linkRTR, ft.eps[0].(*team).peers[1].link.state, "the test needs rank 0's link to 1 not yet up for sends")
	ft.msgs.q = append(ft.msgs.q, ft.msgs.held...)
	ft.msgs.held, ft.msgs.hold = nil, nil
	if !ft.pollUntil(t, 5*time.Second, func() bool { return allSettled(tasks) }) {
		t.Fatalf("the zero-byte alltoall hangs once the link is up: %s", waiting(tasks))
	}
	_, errs := states(tasks)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NoError(t, k0.Close()) // kept for reuse: what it queued is retired
	tasks[0] = nil
	ft.settle(t)
	ft.quiesce(t, tasks)
	closeTasks(t, tasks)
}

// TestEagerOneWrite: an eager message goes as one write with immediate that carries
// its header ahead of the data (one work request, one completion), from a copy
// (outbox: the send is done when queued) or from the source; with the header sent in
// a control slot after the writes instead (the path of a message whose segments
// leave no room for the header's), every collective gets the same bytes. Each mode
// is data-checked over every collective type with eager sizes, and the team's
// counters show which path the messages took.
func TestEagerOneWrite(t *testing.T) {
	defer func(one, out bool) { eagerOneWrite, eagerCopyOut = one, out }(eagerOneWrite, eagerCopyOut)
	rnd := testutil.Rand(t)
	const n = 4
	for _, mode := range []struct {
		name     string
		one, out bool
		path     int // the eagerSent counter every message must go to
	}{{"copy", true, true, 0}, {"source", true, false, 1}, {"two-step", false, false, 2}} {
		t.Run(mode.name, func(t *testing.T) {
			eagerOneWrite, eagerCopyOut = mode.one, mode.out
			ft := newFakeTeam(t, n, nil)
			ft.warm(t)
			sent := func() (s [3]uint64) {
				for _, ep := range ft.eps {
					for i, v := range ep.(*team).eagerSent {
						s[i] += v
					}
				}
				return s
			}
			before := sent()
			for _, c := range collective.Types() {
				if c == collective.Barrier {
					continue
				}
				for _, count := range []int{1, 100, eagerMaxFor(n) / n, eagerMaxFor(n)} {
					cs := newCase(rnd, c, "", n, rnd.IntN(n), count, false)
					cs.dt = collective.Uint8 // count is bytes
					runCase(t, ft, rnd, cs)
				}
			}
			after := sent()
			var got [3]uint64
			for i := range got {
				got[i] = after[i] - before[i]
			}
			t.Logf("eager messages: %d in one write from a copy, %d in one write from the source, %d as writes then a header", got[0], got[1], got[2])
			for i, v := range got {
				if i == mode.path {
					require.Positive(t, v, "no eager message took path %d", i)
				} else {
					require.Zero(t, v, "messages took path %d", i)
				}
			}
		})
	}
}

// TestEagerOutboxDoneWhenQueued: a copied eager send is done at its Post, before
// anything polls (a send from the source waits for its write's completion), and the
// bytes the receiver gets are those of the post, not those the sender wrote into its
// source afterwards.
func TestEagerOutboxDoneWhenQueued(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 2
	for _, out := range []bool{true, false} {
		t.Run(fmt.Sprintf("copy=%v", out), func(t *testing.T) {
			defer func(old bool) { eagerCopyOut = old }(eagerCopyOut)
			eagerCopyOut = out
			ft := newFakeTeam(t, n, nil)
			ft.warm(t)
			runs, want, tasks := postEagerGather(t, ft, rnd)
			defer func() { ft.quiesce(t, tasks) }()
			var err error
			done, err := tasks[1].State()
			require.NoError(t, err)
			require.Equal(t, out, done, "done at Post, before any poll")
			if !out {
				return
			}
			src := runs[1].src.b
			for i := range src {
				src[i] ^= 0xff // the caller's again: nothing of this may arrive
			}
			tasks[0], err = ft.newTask(0, &runs[0].spec)
			require.NoError(t, err)
			ft.run(t, tasks[:1], 1)
			testutil.Equal(t, want[0][1], runs[0].dst.b, "the root's Dst")
		})
	}
}

// TestEagerWriteTakesControlSlot: an eager write consumes a receive at the peer, so
// it waits for a control send slot as a control message does. With every slot held by
// messages whose completions this rank has not polled, an eager send stays in the
// send queue; it does not go onto the queue pair beyond the peer's receives (session
// 10's one-write did, and the hour soak found a split outcome). Once the sender
// polls, it leaves, and the root gets the data.
func TestEagerWriteTakesControlSlot(t *testing.T) {
	defer func(old bool) { eagerCopyOut = old }(eagerCopyOut)
	rnd := testutil.Rand(t)
	const n = 2
	for _, out := range []bool{true, false} {
		t.Run(fmt.Sprintf("copy=%v", out), func(t *testing.T) {
			eagerCopyOut = out
			ft := newFakeTeam(t, n, nil)
			ft.warm(t)
			sender := ft.eps[1].(*team)
			pe := sender.peers[0]
			require.NotNil(t, pe.eager)
			require.True(t, pe.eager.known, "the root's ring is known after warm-up")
			for len(pe.ctlFree) > 0 { // nothing polls: no completion frees a slot
				require.NoError(t, sender.SendCtl(0, []byte("hold a slot")))
			}
			require.Zero(t, pe.queue.len())
			posted := pe.posted
			runs, want, tasks := postEagerGather(t, ft, rnd)
			defer func() { ft.quiesce(t, tasks) }()
			var err error
			require.Equal(t, 1, pe.queue.len(), "the eager write waits in the send queue for a control slot")
			require.Equal(t, posted, pe.posted, "nothing more went onto the queue pair")
			tasks[0], err = ft.newTask(0, &runs[0].spec)
			require.NoError(t, err)
			require.NoError(t, tasks[0].Post(1))
			if !ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }) {
				t.Fatalf("the held eager write never left: %s", waiting(tasks))
			}
			_, errs := states(tasks)
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			check(t, "gather after the slots came back", runs, want)
		})
	}
}

// postEagerGather makes a 2-rank linear gather of an eager size with seeded data, and
// posts rank 1's task (the sender) only; rank 0's is the caller's to make.
func postEagerGather(t *testing.T, ft *fakeTeam, rnd *rand.Rand) ([]*rankRun, [][2][]byte, []driver.Task) {
	t.Helper()
	cs := plainCase(collective.Gather, "linear", 2, 0, 1+rnd.IntN(eagerMaxFor(2)), collective.Uint8, 0)
	runs := cs.build(t, ft.newSeq())
	want := cs.expect(t, runs, fill(rnd, runs))
	tasks := make([]driver.Task, 2)
	var err error
	tasks[1], err = ft.newTask(1, &runs[1].spec)
	require.NoError(t, err)
	require.NoError(t, tasks[1].Post(1))
	return runs, want, tasks
}
