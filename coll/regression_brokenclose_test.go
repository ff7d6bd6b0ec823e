package coll_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/internal/topo"
)

// A rank whose link breaks at its post (fault qperr) and that closes its team at
// once, before its lazy links to the others were up, makes them fail that collective
// at once, not at their deadline. The hour soak found it (a barrier of 2 ranks ended
// at 30 s): the injected break moved a queue pair to error without telling the peer,
// and the close told it "I did my part of everything before collective 1", though the
// broken collective 0 was among those.
func TestRegressionBrokenThenClosed(t *testing.T) {
	watchdog(t, 5*time.Minute)
	colls := map[string]func(r *rank) coll.Args{
		"barrier": func(r *rank) coll.Args { return coll.Args{Type: coll.Barrier} },
		"gather": func(r *rank) coll.Args {
			a := coll.Args{Type: coll.Gather, Root: 0, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, 64), Count: 64}}
			if r.r == 0 {
				a.Dst = coll.BufferDesc{Slice: make([]byte, 64*r.team.Size()), Count: 64 * r.team.Size()}
			}
			return a
		},
		"allreduce": func(r *rank) coll.Args {
			return coll.Args{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum,
				Src: coll.BufferDesc{Slice: make([]byte, 64), Count: 16}, Dst: coll.BufferDesc{Slice: make([]byte, 64), Count: 16}}
		},
	}
	for _, n := range []int{2, 3} {
		for name, args := range colls {
			t.Run(fmt.Sprintf("n=%d/%s", n, name), func(t *testing.T) {
				bad := n - 1
				for round := 0; round < 15; round++ {
					w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second,
						Faults: []coll.Fault{{Kind: coll.FaultQPErr, Rank: bad, N: 1}}})
					errs := w.run(func(r *rank) error {
						err := runColl(context.Background(), r.team, args(r))
						if r.r == bad {
							if cerr := r.team.Close(); cerr != nil {
								return errors.Join(err, cerr)
							}
						}
						return err
					})
					require.ErrorIs(t, errs[bad], coll.ErrInjected, "round %d", round)
					for i, err := range errs {
						if i == bad {
							continue
						}
						if err == nil && name == "gather" && i != 0 {
							// A gather leaf needs nothing of the broken rank: with its block sent
							// and the signature verdict in before the news, it keeps its success
							// (the default outcome contract, docs/design.md "Protocols"). Under
							// load, 12 of 100 runs of this test saw it, before session 14 too.
							continue
						}
						require.Error(t, err, "round %d rank %d", round, i)
						require.NotErrorIs(t, err, coll.ErrTimeout, "round %d rank %d: the news must come before the deadline", round, i)
						require.True(t, errors.Is(err, coll.ErrPeerFailed) || errors.Is(err, coll.ErrTeamBroken), "round %d rank %d: %v", round, i, err)
					}
					w.close()
				}
			})
		}
	}
}

// A rank whose Init fails (its abort queued behind lazy links still being made) and
// that closes its team at once gets its abort out, so the others fail the collective
// naming it, not at their deadline. The soak found it (an alltoall ended at 30 s on a
// rank waiting for a rank whose Init had failed): the mailbox's goroutine waited for
// the team lock, which the closing rank's drain held while it waited for the very
// answer queued behind that goroutine.
func TestRegressionInitFailedThenClosed(t *testing.T) {
	watchdog(t, 5*time.Minute)
	const n, bad, cnt = 3, 2, 93
	for round := 0; round < 20; round++ {
		w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second,
			Faults: []coll.Fault{{Kind: coll.FaultInit, Rank: bad, N: 1}}})
		errs := w.run(func(r *rank) error {
			a := coll.Args{Type: coll.Alltoall, DType: coll.Uint8,
				Src: coll.BufferDesc{Slice: make([]byte, n*cnt), Count: n * cnt}, Dst: coll.BufferDesc{Slice: make([]byte, n*cnt), Count: n * cnt}}
			err := runColl(context.Background(), r.team, a)
			if r.r == bad {
				if cerr := r.team.Close(); cerr != nil {
					return errors.Join(err, cerr)
				}
			}
			return err
		})
		require.ErrorIs(t, errs[bad], coll.ErrInjected, "round %d", round)
		for i := 0; i < bad; i++ {
			require.NotErrorIs(t, errs[i], coll.ErrTimeout, "round %d rank %d: the news must come before the deadline", round, i)
			var pe *coll.PeerError
			require.ErrorAs(t, errs[i], &pe, "round %d rank %d", round, i)
			require.Equal(t, bad, pe.Rank, "round %d rank %d: %v", round, i, errs[i])
		}
		w.close()
	}
}

// A rank that refuses a post because its team broke tells the ranks below it in the
// agreement tree, which may have posted before the break reached them and reported
// done: they fail at once instead of waiting for a decision that passes only through
// it (the soak saw a barrier wait out its deadline and the Timeout after it, 60 s).
func TestRegressionRefusedOnBrokenTeam(t *testing.T) {
	watchdog(t, 3*time.Minute)
	const n, parent, child = 10, 8, 9 // radix-8 agreement tree rooted at 0: 9's parent is 8
	w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second,
		Faults: []coll.Fault{{Kind: coll.FaultQPErr, Rank: parent, N: 1}}})
	childPosted := make(chan struct{})
	errB := make([]error, n)
	// Requests close only once every rank is done with its waits (as the soak's do): a
	// request closed unposted tells the peers too, which would hide the defect.
	var waited sync.WaitGroup
	waited.Add(n)
	errs := w.run(func(r *rank) error {
		var reqs []*coll.Request
		defer func() {
			waited.Done()
			waited.Wait()
			for _, q := range reqs {
				_ = q.Close()
			}
		}()
		src, dst := make([]byte, 8*n), make([]byte, 8*n)
		// A linear gather to 0: rank 8's injected break is of its link to 0, not to 9.
		ga := coll.Args{Type: coll.Gather, Root: 0, Alg: "linear", DType: coll.Uint8, Src: coll.BufferDesc{Slice: src[:8], Count: 8}}
		if r.r == 0 {
			ga.Dst = coll.BufferDesc{Slice: dst, Count: 8 * n}
		}
		a, err := r.team.Init(ga)
		if err != nil {
			return err
		}
		reqs = append(reqs, a)
		b, err := r.team.Init(coll.Args{Type: coll.Barrier})
		if err != nil {
			return err
		}
		reqs = append(reqs, b)
		switch r.r {
		case child:
			// Done with the barrier before anything broke: its vote goes up to 8.
			errB[r.r] = b.Post()
			close(childPosted)
		case parent:
			<-childPosted
		}
		aerr := errors.Join(a.Post(), a.Wait(context.Background()))
		if r.r != child {
			if perr := b.Post(); perr != nil {
				errB[r.r] = perr
				return aerr
			}
		}
		if err := b.Wait(context.Background()); errB[r.r] == nil {
			errB[r.r] = err
		}
		return aerr
	})
	require.ErrorIs(t, errs[parent], coll.ErrInjected)
	// The gather's root needs rank 8's block; a leaf whose block landed before the
	// news came may keep its success (the default outcomes).
	require.Error(t, errs[0], "rank 0: the gather")
	for r := range n {
		require.Error(t, errB[r], "rank %d: the barrier", r)
	}
	require.NotErrorIs(t, errB[child], coll.ErrTimeout)
	// The barrier's own news (collective 1 failed on rank 8), not the team's break,
	// which reached it too but leaves a rank that reported done waiting for the
	// decision until its deadline and the Timeout after it.
	requirePeerError(t, errB[child], parent, 1)
	t.Logf("child's barrier: %v", errB[child])
}

// An Init refused on a broken team takes its number and tells the peers: a peer the
// break has not reached runs the collective, reports done, and would wait for a
// decision that passes only through the refusing rank, out to its deadline and the
// Timeout after it (the soak's barrier after a break, 60 s on one rank of 9).
func TestRegressionInitOnBrokenTeam(t *testing.T) {
	watchdog(t, 2*time.Minute)
	for _, n := range []int{2, 9} {
		w := newWorld(t, n, coll.Config{Timeout: 10 * time.Second})
		coll.BreakSilently(w.ranks[0].team, errors.New("a link failed (test)"))
		errs := w.run(func(r *rank) error { return r.team.Barrier(context.Background()) })
		require.ErrorIs(t, errs[0], coll.ErrTeamBroken)
		for r := 1; r < n; r++ {
			require.NotErrorIs(t, errs[r], coll.ErrTimeout, "n=%d rank %d", n, r)
			var pe *coll.PeerError
			require.ErrorAs(t, errs[r], &pe, "n=%d rank %d: %v", n, r, errs[r])
			require.Equal(t, 0, pe.Rank, "n=%d rank %d: %v", n, r, errs[r])
			require.Equal(t, uint64(0), pe.Seq, "n=%d rank %d: %v", n, r, errs[r])
		}
		// The refused Init took number 0: the next collective is 1 everywhere.
		errs = w.run(func(r *rank) error { return r.team.Barrier(context.Background()) })
		for r := 1; r < n; r++ {
			var pe *coll.PeerError
			require.ErrorAs(t, errs[r], &pe, "n=%d rank %d: %v", n, r, errs[r])
			require.Equal(t, uint64(1), pe.Seq, "n=%d rank %d: %v", n, r, errs[r])
		}
		w.close()
	}
}

// An all-or-nothing rooted collective's Init refused on a broken rank tells that
// rank's children in the collective's agreement tree (rooted at the collective's
// root), not only its overlay neighbours: a child that posted before the break reached
// it and reported done takes no failure but the decision or an abort, and the
// decision passes only through the refusing rank. The hour soak (n=8, faults qperr at
// rank 0 and reg everywhere) saw rank 3's gather #5, rooted at rank 2, done and
// waiting for the final agreement from rank 2, which had refused the Init: rank 2's
// only overlay neighbour, rank 0, had already failed #5 and told of it, but its link
// to rank 3 was down, and rank 3 has no other overlay neighbour. It waited out its
// deadline and the Timeout after it (60 s).
//
// The schedule, over the fake transport: 8 ranks, a gather rooted at rank 2 whose
// tasks' peers are the root and each other rank (rank 3's only task peer is rank 2).
// Rank 3 posts and reports done to rank 2. The link 0-3 fails. Rank 0 posts, finds
// its team broken, fails the gather and floods the news (not to rank 3: the link is
// down). Then rank 2's team breaks (nothing flooded yet) and it refuses the Init: its
// flood goes to rank 0 only, which has told already.
func TestRegressionRefusedInitTellsAgreeChild(t *testing.T) {
	watchdog(t, 2*time.Minute)
	const n, root, child, relay = 8, 2, 3, 0
	// The shape the test needs, from the trees coll builds (radix 8 both).
	if p, _ := topo.KNomialPeers(n, root, child, agreeRadix); p != root {
		t.Fatalf("rank %d's agreement parent is %d, want %d", child, p, root)
	}
	op, oc := topo.KNomialPeers(n, 0, root, agreeRadix)
	if op != relay || len(oc) != 0 {
		t.Fatalf("rank %d's overlay neighbours: parent %d, children %v; want only %d", root, op, oc, relay)
	}
	if p, c := topo.KNomialPeers(n, 0, child, agreeRadix); p != relay || len(c) != 0 {
		t.Fatalf("rank %d's overlay neighbours: parent %d, children %v; want only %d", child, p, c, relay)
	}
	pol := fakePolicy{TaskPeers: func(rank, n int) []int {
		if rank != root {
			return []int{root}
		}
		var ps []int
		for p := range n {
			if p != root {
				ps = append(ps, p)
			}
		}
		return ps
	}}
	h := newFakeHub(t, n, pol, testutil.Rand(t))
	// Rank 3's part is done at its first poll; the others' only by an abort.
	h.setPlan(func(rank int, _ uint64, _ uint32) taskPlan {
		if rank == child {
			return taskPlan{Polls: 0}
		}
		return taskPlan{Polls: -1}
	})
	cfg := fakeConfig()
	w := newFakeWorld(t, h, cfg)
	gather := func(rank int) coll.Args {
		a := coll.Args{Type: coll.Gather, Root: root, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, 8), Count: 8}}
		if rank == root {
			a.Dst = coll.BufferDesc{Slice: make([]byte, 8*n), Count: 8 * n}
		}
		return a
	}
	reqs := make([]*coll.Request, n)
	defer func() {
		for r, q := range reqs {
			if q != nil {
				require.NoError(t, q.Close(), "rank %d", r)
			}
		}
	}()

	var err error
	reqs[child], err = w.teams[child].Init(gather(child))
	require.NoError(t, err)
	require.NoError(t, reqs[child].Post())
	h.mu.Lock()
	doneSent := h.sent[wireDone]
	h.cutLocked(relay, child)
	h.mu.Unlock()
	require.Equal(t, 1, doneSent, "rank %d reported done before the link failed", child)
	posted := time.Now()

	reqs[relay], err = w.teams[relay].Init(gather(relay))
	require.NoError(t, err)
	_ = reqs[relay].Post() // finds the link down: the team breaks, the post fails
	h.mu.Lock()
	told := h.abortsFrom[relay]
	h.mu.Unlock()
	require.Positive(t, told, "rank %d failed the gather and told of it", relay)

	coll.BreakSilently(w.teams[root], errors.New("a link failed (test)"))
	_, err = w.teams[root].Init(gather(root))
	require.ErrorIs(t, err, coll.ErrTeamBroken)

	errs := make([]error, n)
	var took time.Duration
	var wg sync.WaitGroup
	for r := range n {
		if r == root {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if reqs[r] == nil {
				var err error
				if reqs[r], err = w.teams[r].Init(gather(r)); err != nil {
					errs[r] = err
					return
				}
				if err := reqs[r].Post(); err != nil {
					errs[r] = err
					return
				}
			}
			errs[r] = reqs[r].Wait(context.Background())
			if r == child {
				took = time.Since(posted)
			}
		}()
	}
	wg.Wait()
	t.Logf("rank %d's gather ended after %v: %v", child, took.Round(time.Millisecond), errs[child])
	t.Log(h.stats())
	for r := range n {
		if r != root {
			require.Error(t, errs[r], "rank %d", r)
		}
	}
	require.NotErrorIs(t, errs[child], coll.ErrTimeout)
	requirePeerError(t, errs[child], root, 0)
	require.Less(t, took, cfg.Timeout, "rank %d waited for its deadline", child)
}

// An Init refused on a broken team with a root outside the team takes its number and
// is refused like any other: the agreement's children it would tell come from the
// root, and a bad one gives none (it must not panic).
func TestRefusedInitBadRoot(t *testing.T) {
	watchdog(t, time.Minute)
	const n = 4
	h := newFakeHub(t, n, fakePolicy{}, testutil.Rand(t))
	w := newFakeWorld(t, h, fakeConfig())
	coll.BreakSilently(w.teams[1], errors.New("a link failed (test)"))
	for i, root := range []int{-1, n, 1 << 40} {
		_, err := w.teams[1].Init(coll.Args{Type: coll.Gather, Root: root, DType: coll.Uint8,
			Src: coll.BufferDesc{Slice: make([]byte, 8), Count: 8}})
		require.ErrorIs(t, err, coll.ErrTeamBroken, "root %d", root)
		require.Equal(t, uint64(i+1), coll.NextSeq(w.teams[1]), "root %d", root)
	}
}

// requirePeerError asserts that err is a PeerError naming rank and collective seq: the
// news of the rank that failed, not the team's break nor a deadline.
func requirePeerError(t *testing.T, err error, rank int, seq uint64) {
	t.Helper()
	var pe *coll.PeerError
	require.ErrorAs(t, err, &pe, "%v", err)
	require.Equal(t, rank, pe.Rank, "%v", err)
	require.Equal(t, seq, pe.Seq, "%v", err)
}
