package coll_test

// Unit tests of coll's protocols (completion agreement, abort flooding and
// acknowledgement, cut-off after AbortGrace, departure, mismatch detection) over the
// fake transport of fakedriver_test.go, which delays and reorders control messages.
// No assertion is about time: a hang is caught by the ctx of every Wait (testCtx) and
// by Config.Timeout.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/internal/topo"
)

// agreeRadix is coll's agreement tree radix (init.go), to know a rank's children.
const agreeRadix = 8

// fifoPolicies are RC-legal schedules: per-peer FIFO kept.
var fifoPolicies = []fakePolicy{
	{},
	{MaxDelay: 3},
	{MaxDelay: 4, CrossPeer: true},
	{MaxDelay: 2, CrossPeer: true, Batch: 1},
}

func barrierArgs(persistent bool) coll.Args {
	a := coll.Args{Type: coll.Barrier}
	if persistent {
		a.Flags = coll.Persistent
	}
	return a
}

// allreduceArgs is a small allreduce on Go memory: the fake moves no data, so only the
// protocol runs.
func allreduceArgs(persistent bool, count int) coll.Args {
	a := coll.Args{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum,
		Src: coll.BufferDesc{Slice: make([]byte, 4*count), Count: count},
		Dst: coll.BufferDesc{Slice: make([]byte, 4*count), Count: count}}
	if persistent {
		a.Flags = coll.Persistent
	}
	return a
}

// posts initializes a, posts it up to n times (Wait after each) and closes it. It
// returns each post's outcome (Wait's error, else Post's), stopping after the first
// failure, and the first error of Init or Close.
func posts(ctx context.Context, tm *coll.Team, a coll.Args, n int) ([]error, error) {
	req, err := tm.Init(a)
	if err != nil {
		return nil, err
	}
	var out []error
	for range n {
		perr := req.Post()
		werr := req.Wait(ctx)
		if werr == nil {
			werr = perr
		}
		out = append(out, werr)
		if werr != nil {
			break
		}
	}
	return out, req.Close()
}

// peerErr returns err's *coll.PeerError, or nil.
func peerErr(err error) *coll.PeerError {
	var pe *coll.PeerError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// TestProtoAgreement: with random delays and cross-peer reordering (RC-legal
// schedules), every rank's post succeeds, for teams of 1 to 17 ranks, persistent
// requests posted many times; every rank reports done and hears the decision exactly
// once per post, nothing is aborted, and nothing leaks.
func TestProtoAgreement(t *testing.T) {
	base := runtime.NumGoroutine()
	rnd := testutil.Rand(t)
	const reps = 6
	for n := 1; n <= 17; n++ {
		pol := fifoPolicies[n%len(fifoPolicies)]
		t.Run(fmt.Sprintf("n%d/%v", n, pol), func(t *testing.T) {
			runAgreement(t, rnd, n, pol, reps)
		})
	}
	settleGoroutines(t, base)
}

// doneSeqReached reports whether rank got a completion report of collective seq or a
// later one, or has no children to get one from.
func (h *fakeHub) doneSeqReached(rank int, seq uint64) bool {
	if _, children := topo.KNomialPeers(h.n, 0, rank, agreeRadix); len(children) == 0 {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.doneSeqTo[rank] > seq
}

func runAgreement(t *testing.T, rnd *rand.Rand, n int, pol fakePolicy, reps int) {
	h := newFakeHub(t, n, pol, rnd)
	h.setPlan(func(int, uint64, uint32) taskPlan { return taskPlan{Polls: h.intn(4)} })
	w := newFakeWorld(t, h, fakeConfig())
	ctx := testCtx(t)
	errs := w.run(func(rank int, tm *coll.Team) error {
		// prog is a persistent request kept open throughout; between collectives the
		// rank polls through it (as a progress loop would) before it initializes the
		// next one, so that peers ahead of it reach it with messages of collectives
		// it has not initialized yet.
		prog, err := tm.Init(barrierArgs(true))
		if err != nil {
			return err
		}
		var all []error
		if err := prog.Post(); err != nil {
			all = append(all, err)
		}
		if err := prog.Wait(ctx); err != nil {
			all = append(all, err)
		}
		colls := []struct {
			a    coll.Args
			reps int
		}{
			{barrierArgs(true), reps},
			{allreduceArgs(true, 4), reps},
			{barrierArgs(false), 1},
			{allreduceArgs(false, 3), 1},
			{barrierArgs(false), 1},
		}
		for i, c := range colls {
			res, err := posts(ctx, tm, c.a, c.reps)
			if err != nil {
				all = append(all, fmt.Errorf("collective %d: %w", i, err))
			}
			if len(res) != c.reps {
				all = append(all, fmt.Errorf("collective %d: %d of %d posts", i, len(res), c.reps))
			}
			for p, e := range res {
				if e != nil {
					all = append(all, fmt.Errorf("collective %d post %d: %w", i, p+1, e))
				}
			}
			// Every other time, a rank with children polls until a child, ahead of
			// it, reported the next collective done: the report must be kept for the
			// collective this rank has not initialized yet (coll's stash). The cap
			// only keeps a slow schedule going; it asserts nothing.
			next := uint64(i + 2) // prog is collective 0, collective i is i+1
			for j := 0; j < 1+(rank+i)%4 || (i+rank)%2 == 0 && i+1 < len(colls) && j < 20000 && !h.doneSeqReached(rank, next); j++ {
				if _, err := prog.Test(); err != nil {
					all = append(all, err)
				}
				runtime.Gosched()
			}
		}
		return errors.Join(append(all, prog.Close())...)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for r, tm := range w.teams {
		if err := tm.Broken(); err != nil {
			t.Errorf("rank %d: team broken: %v", r, err)
		}
	}
	t.Log(h.stats())
	total := 2*reps + 4
	h.mu.Lock()
	defer func() {
		h.mu.Unlock()
		if err := w.close(); err != nil {
			t.Error(err)
		}
		t.Log("after close: " + h.stats())
	}()
	// Every non-root rank reports each post done once and hears the decision once.
	if want := (n - 1) * total; h.sent[wireDone] != want || h.delivered[wireDone] != want {
		t.Errorf("completion reports: sent %d, delivered %d, want %d", h.sent[wireDone], h.delivered[wireDone], want)
	}
	if want := (n - 1) * total; h.sent[wireFin] != want || h.delivered[wireFin] != want {
		t.Errorf("decisions: sent %d, delivered %d, want %d", h.sent[wireFin], h.delivered[wireFin], want)
	}
	// Before the teams close nothing is lost (afterwards, what is still on its way to a
	// closed team is: the aborts by which a closed persistent request tells its peers
	// it will not be posted again).
	if h.sent[wireBroken] != 0 || len(h.cuts) != 0 || h.dropped != 0 {
		t.Errorf("a healthy run broke something: %d broken, %d cut-offs, %d dropped", h.sent[wireBroken], len(h.cuts), h.dropped)
	}
}

// TestProtoAgreementReorderPeer: the same success path when even one peer's messages
// are reordered, which RC never does (it breaks SendCtl's FIFO promise). Each
// link carries at most one message of a post in each direction on the success path
// (done up, decision down, and the next post needs the decision), so the agreement
// does not depend on per-peer FIFO.
func TestProtoAgreementReorderPeer(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, n := range []int{2, 5, 9, 17} {
		pol := fakePolicy{MaxDelay: 3, ReorderPeer: true}
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) { runAgreement(t, rnd, n, pol, 4) })
	}
}

// failureRun is one trial of TestProtoTaskFailure: rank f's task fails at post k of a
// persistent barrier.
type failureRun struct {
	n, f, k  int
	atPost   bool // Post fails, else State after some polls
	pol      fakePolicy
	statePol int
}

// TestProtoTaskFailure: a task failure on one random rank at post k of a persistent
// barrier fails post k on every rank (no rank succeeds, none hangs); the failing
// rank's error is its own, every other rank's wraps coll.ErrPeerFailed and names the
// failing rank, the collective and the post; nobody is cut off, and the team stays
// usable: the next collective succeeds everywhere.
func TestProtoTaskFailure(t *testing.T) {
	rnd := testutil.Rand(t)
	pols := append(append([]fakePolicy(nil), fifoPolicies...), fakePolicy{MaxDelay: 3, ReorderPeer: true})
	for trial := range 16 {
		fr := failureRun{n: 1 + rnd.IntN(17), k: 1 + rnd.IntN(3), atPost: rnd.IntN(2) == 0,
			pol: pols[trial%len(pols)], statePol: rnd.IntN(6)}
		fr.f = rnd.IntN(fr.n)
		t.Run(fmt.Sprintf("%d/n%d/f%d/k%d/atPost=%v/%v", trial, fr.n, fr.f, fr.k, fr.atPost, fr.pol), func(t *testing.T) {
			runTaskFailure(t, rnd, fr)
		})
	}
}

func runTaskFailure(t *testing.T, rnd *rand.Rand, fr failureRun) {
	h := newFakeHub(t, fr.n, fr.pol, rnd)
	h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
		p := taskPlan{Polls: h.intn(4), AbortPolls: h.intn(3)}
		if rank == fr.f && seq == 0 && post == uint32(fr.k) {
			if fr.atPost {
				p.PostErr = errFakeTask
			} else {
				p.Polls, p.StateErr = fr.statePol, errFakeTask
			}
		}
		return p
	})
	w := newFakeWorld(t, h, fakeConfig())
	ctx := testCtx(t)
	type result struct {
		posts []error
		next  error
	}
	res := make([]result, fr.n)
	errs := w.run(func(rank int, tm *coll.Team) error {
		ps, err := posts(ctx, tm, barrierArgs(true), fr.k)
		if err != nil {
			return err
		}
		res[rank].posts = ps
		res[rank].next = tm.Barrier(ctx)
		return nil
	})
	t.Log(h.stats())
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Init or Close: %v", r, err)
		}
	}
	for r, rr := range res {
		if len(rr.posts) != fr.k {
			t.Fatalf("rank %d: posts stopped after %d of %d: %v", r, len(rr.posts), fr.k, rr.posts)
		}
		for p, err := range rr.posts[:fr.k-1] {
			if err != nil {
				t.Errorf("rank %d post %d (before the failure): %v", r, p+1, err)
			}
		}
		err := rr.posts[fr.k-1]
		switch {
		case err == nil:
			t.Errorf("rank %d: post %d succeeded though rank %d failed it", r, fr.k, fr.f)
		case r == fr.f:
			if !errors.Is(err, errFakeTask) || errors.Is(err, coll.ErrPeerFailed) {
				t.Errorf("failing rank %d: want its own error, got %v", r, err)
			}
		default:
			pe := peerErr(err)
			if !errors.Is(err, coll.ErrPeerFailed) || pe == nil {
				t.Errorf("rank %d: want a *PeerError wrapping ErrPeerFailed, got %v", r, err)
			} else if pe.Rank != fr.f || pe.Seq != 0 || pe.Post != uint32(fr.k) || !strings.Contains(pe.Cause, errFakeTask.Error()) {
				t.Errorf("rank %d: PeerError %+v, want rank %d, collective 0, post %d, the cause", r, *pe, fr.f, fr.k)
			}
			if errors.Is(err, coll.ErrTeamBroken) {
				t.Errorf("rank %d: a task failure broke the team: %v", r, err)
			}
		}
		if rr.next != nil {
			t.Errorf("rank %d: the collective after the failure: %v", r, rr.next)
		}
		if err := w.teams[r].Broken(); err != nil {
			t.Errorf("rank %d: team broken: %v", r, err)
		}
	}
	if c := h.cutOffs(); len(c) > 0 {
		t.Errorf("cut-offs after a plain task failure: %+v", c)
	}
}

// TestProtoLinkFailureBreaksTeam: a queue-pair error at post k on one rank (the
// injected fault.QPErr, which calls Task.BreakLink) fails that post on every rank and
// breaks the team everywhere: the next Init fails with ErrTeamBroken.
func TestProtoLinkFailureBreaksTeam(t *testing.T) {
	rnd := testutil.Rand(t)
	for trial := range 4 {
		n, k := 2+rnd.IntN(8), 1+rnd.IntN(3)
		f := rnd.IntN(n)
		pol := fifoPolicies[trial%len(fifoPolicies)]
		t.Run(fmt.Sprintf("n%d/f%d/k%d/%v", n, f, k, pol), func(t *testing.T) {
			h := newFakeHub(t, n, pol, rnd)
			h.setPlan(func(int, uint64, uint32) taskPlan { return taskPlan{Polls: h.intn(4), AbortPolls: h.intn(3)} })
			cfg := fakeConfig()
			cfg.Faults = []coll.Fault{{Kind: coll.FaultQPErr, Rank: f, N: k}}
			w := newFakeWorld(t, h, cfg)
			ctx := testCtx(t)
			res := make([][]error, n)
			next := make([]error, n)
			errs := w.run(func(rank int, tm *coll.Team) error {
				ps, err := posts(ctx, tm, barrierArgs(true), k)
				res[rank] = ps
				_, next[rank] = tm.Init(barrierArgs(false))
				return err
			})
			t.Log(h.stats())
			for r := range n {
				if errs[r] != nil {
					t.Errorf("rank %d: Init or Close: %v", r, errs[r])
				}
				ps := res[r]
				if len(ps) == 0 || len(ps) > k {
					t.Fatalf("rank %d: %d posts", r, len(ps))
				}
				last := ps[len(ps)-1]
				switch {
				case last == nil:
					t.Errorf("rank %d: post %d succeeded though rank %d lost a link", r, k, f)
				case !errors.Is(last, coll.ErrTeamBroken):
					t.Errorf("rank %d: post %d: want ErrTeamBroken, got %v", r, len(ps), last)
				case r == f && len(ps) != k:
					t.Errorf("rank %d: failed post %d, before its link failed at post %d: %v", r, len(ps), k, last)
				case len(ps) < k:
					// The breakage overtook the decision of the previous post, which
					// succeeded elsewhere: see TestProtoBrokenDuringDecision.
					t.Logf("rank %d: post %d failed (the link broke at post %d): %v", r, len(ps), k, last)
				}
				if !errors.Is(next[r], coll.ErrTeamBroken) {
					t.Errorf("rank %d: Init after the link failure: want ErrTeamBroken, got %v", r, next[r])
				}
			}
		})
	}
}

// TestProtoBrokenDuringDecision: a team that breaks while a post's decision is on
// its way must not fail that post on some ranks after it succeeded on others.
// Schedule (RC-legal, per-peer FIFO kept): 3 ranks, a persistent barrier; the root's
// decision of post 1 to rank 2 is slow (link 0->2 held); rank 1 gets its decision,
// posts 2 and loses its link to rank 2 there (fault.QPErr, Task.BreakLink). Rank 2,
// which reported post 1 done and waits for the decision, learns that its team broke
// before the decision arrives.
//
// FAILS today (coll bug): setBroken fails every request in flight, including one in
// sAgree that already reported done, so rank 2's post 1 fails while ranks 0 and 1
// succeeded. A rank that reported done should take its outcome from its parent (the
// decision, or an abort coming down from it) as long as that link is up.
func TestProtoBrokenDuringDecision(t *testing.T) {
	h := newFakeHub(t, 3, fakePolicy{}, testutil.Rand(t))
	// The root may send rank 1's decision, and rank 1 act on it, before it sends rank
	// 2's: rank 1 waits until the link is held, or its release could come first and
	// the hold last for good (1 run in about 150 under load, outcome "differs").
	finHeld := make(chan struct{})
	var holdOnce sync.Once
	h.onSend = func(h *fakeHub, from, to int, b []byte) {
		if from == 0 && to == 2 && b[0] == wireFin {
			holdOnce.Do(func() {
				h.held[0][2] = true
				close(finHeld)
			})
		}
	}
	cfg := fakeConfig()
	cfg.Faults = []coll.Fault{{Kind: coll.FaultQPErr, Rank: 1, N: 2}}
	w := newFakeWorld(t, h, cfg)
	ctx := testCtx(t)
	first := make([]error, 3)
	reqs := make([]*coll.Request, 3)
	for r := range 3 {
		req, err := w.teams[r].Init(barrierArgs(true))
		if err != nil {
			t.Fatal(err)
		}
		reqs[r] = req
	}
	rank1Done := make(chan struct{})
	errs := w.run(func(rank int, tm *coll.Team) error {
		req := reqs[rank]
		if err := req.Post(); err != nil {
			first[rank] = err
		} else {
			first[rank] = req.Wait(ctx)
		}
		if rank != 1 {
			keepPolling(ctx, req, rank1Done)
			return nil
		}
		defer close(rank1Done)
		if first[rank] == nil {
			// Post 2 breaks the link 1-2 (at once, in Post); then the root's link
			// to rank 2 recovers.
			select {
			case <-finHeld:
			case <-ctx.Done():
				return fmt.Errorf("rank 0 never sent rank 2 its decision")
			}
			_ = req.Post()
			h.hold(0, 2, false)
			_ = req.Wait(ctx)
		}
		return nil
	})
	for r, req := range reqs {
		if err := req.Close(); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
		if errs[r] != nil {
			t.Errorf("rank %d: %v", r, errs[r])
		}
		t.Logf("rank %d: post 1: %v", r, first[r])
	}
	t.Log(h.stats())
	checkAllOrNothing(t, first)
}

// TestProtoLateFailure: a rank fails after its whole subtree reported done to it (the
// root of the agreement tree after every other rank finished, or an inner node after
// its children did): no rank succeeds while another fails.
func TestProtoLateFailure(t *testing.T) {
	rnd := testutil.Rand(t)
	for trial := range 12 {
		n := 2 + rnd.IntN(16)
		f := 0 // the root, every other trial
		if trial%2 == 1 {
			f = rnd.IntN(n)
		}
		k := 1 + rnd.IntN(3)
		pol := fifoPolicies[trial%len(fifoPolicies)]
		t.Run(fmt.Sprintf("n%d/f%d/k%d/%v", n, f, k, pol), func(t *testing.T) {
			_, children := topo.KNomialPeers(n, 0, f, agreeRadix)
			h := newFakeHub(t, n, pol, rnd)
			h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
				p := taskPlan{Polls: h.intn(4), AbortPolls: h.intn(3)}
				if rank == f && post == uint32(k) {
					// Called under h.mu at Post: count the reports from here.
					base := h.doneTo[f]
					p.Polls, p.StateErr = 0, errFakeTask
					p.When = func(h *fakeHub) bool {
						if h.doneTo[f]-base < len(children) {
							return false
						}
						for r := range n {
							if r != f && !h.endedLocked(r, seq, post) {
								return false
							}
						}
						return true
					}
				}
				return p
			})
			w := newFakeWorld(t, h, fakeConfig())
			ctx := testCtx(t)
			last := make([]error, n)
			errs := w.run(func(rank int, tm *coll.Team) error {
				ps, err := posts(ctx, tm, barrierArgs(true), k)
				if len(ps) > 0 {
					last[rank] = ps[len(ps)-1]
				}
				if len(ps) != k {
					err = errors.Join(err, fmt.Errorf("%d posts of %d: %v", len(ps), k, ps))
				}
				return err
			})
			t.Log(h.stats())
			for r := range n {
				if errs[r] != nil {
					t.Errorf("rank %d: %v", r, errs[r])
				}
			}
			checkAllOrNothing(t, last)
			for r := range n {
				if r != f {
					if pe := peerErr(last[r]); pe == nil || pe.Rank != f {
						t.Errorf("rank %d: want a PeerError naming rank %d, got %v", r, f, last[r])
					}
				}
			}
		})
	}
}

// keepPolling drives progress through req (as a rank's next collective would) until
// stop is closed, so that the rank answers its peers' aborts.
func keepPolling(ctx context.Context, req *coll.Request, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
			_, _ = req.Test()
			runtime.Gosched()
		}
	}
}

// checkAllOrNothing fails t if some ranks succeeded and others failed.
func checkAllOrNothing(t testing.TB, errs []error) {
	t.Helper()
	var ok, failed []string
	for r, err := range errs {
		if err == nil {
			ok = append(ok, fmt.Sprint(r))
		} else {
			failed = append(failed, fmt.Sprintf("%d (%v)", r, err))
		}
	}
	if len(ok) > 0 && len(failed) > 0 {
		t.Errorf("outcome differs across ranks: succeeded on %s; failed on %s", strings.Join(ok, ","), strings.Join(failed, "; "))
	}
}

// TestProtoLateDeadline: a rank whose deadline passes after it reported done must not
// end the post with a different outcome than the others. Schedule (RC-legal, FIFO
// kept): 3 ranks, rank 1 reports done then its Wait deadline passes; its AbortGrace
// (lateDecision) runs out before rank 2 finished, so rank 1 fails the post and floods
// an abort; rank 1's links are slow, so its abort arrives after rank 2's completion
// report reached the root, which decides success.
//
// FAILS today (coll bug): lateDecision bounds the wait for the decision by AbortGrace,
// after which rank 1 fails on its own; the root, already decided, just acknowledges
// rank 1's abort. A rank that reported done should not decide alone: its abort (or
// deadline) should only ask the root, and its outcome should be what comes down from
// its parent (the decision, or an abort), as long as that link is up.
func TestProtoLateDeadline(t *testing.T) {
	h := newFakeHub(t, 3, fakePolicy{}, testutil.Rand(t))
	h.onSend = func(h *fakeHub, from, to int, b []byte) {
		if from == 1 && b[0] == wireAbort {
			h.held[1][0], h.held[1][2] = true, true // rank 1's links are slow from now on
		}
	}
	h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
		p := taskPlan{Polls: 0}
		if rank == 2 {
			// Rank 2 is slow: it finishes only once rank 1 gave up.
			p.When = func(h *fakeHub) bool { return h.abortsFrom[1] > 0 }
		}
		return p
	})
	cfg := fakeConfig()
	cfg.AbortGrace = coll.MinAbortGrace
	w := newFakeWorld(t, h, cfg)
	ctx := testCtx(t)
	out := make([]error, 3)
	done := make(chan int, 3)
	reqs := make([]*coll.Request, 3)
	for r := range 3 {
		req, err := w.teams[r].Init(barrierArgs(false))
		if err != nil {
			t.Fatal(err)
		}
		reqs[r] = req
		t.Cleanup(func() { _ = req.Close() })
	}
	rank1Done := make(chan struct{})
	for r := range 3 {
		go func() {
			wctx := ctx
			if r == 1 {
				var cancel context.CancelFunc
				wctx, cancel = context.WithDeadline(ctx, time.Now()) // expired: only the grace is left
				defer cancel()
			}
			if err := reqs[r].Post(); err != nil {
				out[r] = err
			}
			if err := reqs[r].Wait(wctx); out[r] == nil {
				out[r] = err
			}
			done <- r
			if r != 1 {
				// Answer rank 1's abort once its links recover.
				keepPolling(ctx, reqs[r], rank1Done)
			}
		}()
	}
	// Once ranks 0 and 2 finished (or rank 1 did, first), rank 1's links recover.
	finished := map[int]bool{}
	for len(finished) < 3 {
		select {
		case r := <-done:
			finished[r] = true
			if r == 1 {
				close(rank1Done)
			}
		case <-ctx.Done():
			t.Fatalf("hang: finished %v; %s", finished, h.stats())
		}
		if finished[0] && finished[2] || finished[1] {
			h.hold(1, 0, false)
			h.hold(1, 2, false)
		}
	}
	t.Log(h.stats())
	for r, err := range out {
		t.Logf("rank %d: %v", r, err)
	}
	checkAllOrNothing(t, out)
}

// TestProtoSilentPeerCutOff: a hung peer (its endpoint delivers nothing and its task
// never finishes) never acknowledges the abort of a failed post: the failing rank cuts
// it off after its AbortGrace (CutOff on the transport, for that peer, first of all
// cut-offs), its Wait returns its own error joined with ErrTeamBroken, and every rank
// ends with an error and a broken team (the next Init fails with ErrTeamBroken), the
// hung one included, which learns it from its cut links.
func TestProtoSilentPeerCutOff(t *testing.T) {
	rnd := testutil.Rand(t)
	for trial := range 3 {
		n := 3 + rnd.IntN(4)
		f := rnd.IntN(n)
		s := (f + 1 + rnd.IntN(n-1)) % n
		pol := fifoPolicies[trial%len(fifoPolicies)]
		t.Run(fmt.Sprintf("n%d/f%d/silent%d/%v", n, f, s, pol), func(t *testing.T) {
			h := newFakeHub(t, n, pol, rnd)
			h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
				p := taskPlan{Polls: h.intn(3), AbortPolls: h.intn(3)}
				switch rank {
				case s:
					p.Polls = -1
				case f:
					// A failure after its buffers were exposed: one at Post exposed
					// nothing, and waits for no acknowledgement (Task.Writers).
					p.Polls, p.StateErr = 0, errFakeTask
				}
				return p
			})
			h.setMute(s, true)
			// Only the failing rank (and the hung one, once it finds out) has a short
			// grace: the others wait long enough that the cut-off is the failing rank's.
			w := newFakeWorldEach(t, h, func(rank int) coll.Config {
				cfg := coll.Config{Timeout: 3 * time.Second, AbortGrace: 3 * time.Second}
				if rank == f || rank == s {
					cfg.AbortGrace = coll.MinAbortGrace
				}
				return cfg
			})
			ctx := testCtx(t)
			out := make([]error, n)
			next := make([]error, n)
			errs := w.run(func(rank int, tm *coll.Team) error {
				ps, err := posts(ctx, tm, barrierArgs(false), 1)
				if len(ps) == 1 {
					out[rank] = ps[0]
				}
				// A rank whose own task was done waits for nobody's acknowledgement
				// (Task.Writers) and may return before the cut-off broke the team; it
				// learns of the break from its next collective.
				next[rank] = tm.Barrier(ctx)
				return err
			})
			t.Log(h.stats())
			cuts := h.cutOffs()
			if len(cuts) == 0 || cuts[0].by != f || cuts[0].peer != s || !strings.Contains(cuts[0].why, "did not acknowledge") {
				t.Errorf("cut-offs %+v: want rank %d to cut rank %d off first", cuts, f, s)
			}
			if err := out[f]; !errors.Is(err, errFakeTask) || !errors.Is(err, coll.ErrTeamBroken) {
				t.Errorf("failing rank %d: want its own error and ErrTeamBroken, got %v", f, err)
			}
			for r := range n {
				if errs[r] != nil {
					t.Errorf("rank %d: Init or Close: %v", r, errs[r])
				}
				if out[r] == nil {
					t.Errorf("rank %d: the post succeeded", r)
				} else if r != f && r != s && !errors.Is(out[r], coll.ErrPeerFailed) {
					t.Errorf("rank %d: want ErrPeerFailed, got %v", r, out[r])
				}
				if err := w.teams[r].Broken(); !errors.Is(err, coll.ErrTeamBroken) {
					t.Errorf("rank %d: team not broken: %v", r, err)
				}
				if !errors.Is(next[r], coll.ErrTeamBroken) {
					t.Errorf("rank %d: a collective on the broken team: %v", r, next[r])
				}
			}
		})
	}
}

// TestProtoTeamClosedMidSequence: a rank that closes its team after m collectives
// makes its peers fail, with a *PeerError naming it, the collectives it never joins:
// the next post of a persistent request it closed, and every later collective; the
// collectives it took part in succeed, nobody is cut off and the team is not broken.
func TestProtoTeamClosedMidSequence(t *testing.T) {
	rnd := testutil.Rand(t)
	for trial := range 6 {
		n := 2 + rnd.IntN(7)
		l := rnd.IntN(n)
		m := 1 + rnd.IntN(4)
		persistent := trial%2 == 0
		pol := fifoPolicies[trial%len(fifoPolicies)]
		t.Run(fmt.Sprintf("n%d/left%d/m%d/persistent=%v/%v", n, l, m, persistent, pol), func(t *testing.T) {
			h := newFakeHub(t, n, pol, rnd)
			h.setPlan(func(int, uint64, uint32) taskPlan { return taskPlan{Polls: h.intn(4), AbortPolls: h.intn(3)} })
			w := newFakeWorld(t, h, fakeConfig())
			ctx := testCtx(t)
			// Every rank's outcomes in order; rank l stops after m and closes.
			res := make([][]error, n)
			errs := w.run(func(rank int, tm *coll.Team) error {
				want := m + 2
				if rank == l {
					want = m
				}
				var out []error
				if persistent {
					ps, err := posts(ctx, tm, barrierArgs(true), min(want, m+1))
					if err != nil {
						return err
					}
					out = append(out, ps...)
				}
				for len(out) < want {
					out = append(out, tm.Barrier(ctx))
				}
				res[rank] = out
				if rank == l {
					return tm.Close()
				}
				return nil
			})
			t.Log(h.stats())
			for r := range n {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				for i, err := range res[r] {
					switch {
					case i < m && err != nil:
						t.Errorf("rank %d: collective %d (rank %d still there): %v", r, i+1, l, err)
					case i >= m:
						if pe := peerErr(err); pe == nil || pe.Rank != l || !errors.Is(err, coll.ErrPeerFailed) {
							t.Errorf("rank %d: collective %d (rank %d gone): want a PeerError naming it, got %v", r, i+1, l, err)
						}
					}
				}
				if r != l {
					if err := w.teams[r].Broken(); err != nil {
						t.Errorf("rank %d: team broken: %v", r, err)
					}
				}
			}
			if c := h.cutOffs(); len(c) > 0 {
				t.Errorf("cut-offs: %+v", c)
			}
		})
	}
}

// TestProtoMismatch: one rank initializes a different collective than the others,
// with all-or-nothing outcomes and without. None hangs; every rank that fails has an
// error that wraps ErrMismatch (the ranks that compared signatures by their own error,
// the others by a PeerError) and names the odd rank, and at least one says why; the
// team stays usable. With all-or-nothing outcomes no rank succeeds. Without, the odd
// rank and its neighbours in the overlay tree (the signature check's edges) fail, and
// a rank further away may succeed if its part was done before the news came: these
// fake tasks need nothing of their peers, and on a real transport a rank whose part
// needs the odd rank's data cannot finish (TestRootMismatch and TestMismatchDetected
// check outputs there).
func TestProtoMismatch(t *testing.T) {
	rnd := testutil.Rand(t)
	bcast := func() coll.Args {
		return coll.Args{Type: coll.Bcast, Root: 0, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, 8), Count: 8}}
	}
	variants := []struct {
		name     string
		all, odd func() coll.Args
	}{
		{"allreduce-among-barriers", func() coll.Args { return barrierArgs(false) }, func() coll.Args { return allreduceArgs(false, 4) }},
		{"bcast-among-barriers", func() coll.Args { return barrierArgs(false) }, bcast},
		{"barrier-among-allreduces", func() coll.Args { return allreduceArgs(false, 4) }, func() coll.Args { return barrierArgs(false) }},
		{"allreduce-count", func() coll.Args { return allreduceArgs(false, 4) }, func() coll.Args { return allreduceArgs(false, 5) }},
	}
	for trial := range 16 {
		v := variants[trial%len(variants)]
		n := 2 + rnd.IntN(16)
		x := rnd.IntN(n)
		pol := fifoPolicies[trial%len(fifoPolicies)]
		aon := trial%2 == 0
		t.Run(fmt.Sprintf("%s/n%d/odd%d/%v/all-or-nothing=%v", v.name, n, x, pol, aon), func(t *testing.T) {
			h := newFakeHub(t, n, pol, rnd)
			h.setPlan(func(int, uint64, uint32) taskPlan { return taskPlan{Polls: h.intn(4), AbortPolls: h.intn(3)} })
			cfg := fakeConfig()
			cfg.AllOrNothing = aon
			w := newFakeWorld(t, h, cfg)
			ctx := testCtx(t)
			out := make([]error, n)
			next := make([]error, n)
			w.run(func(rank int, tm *coll.Team) error {
				a := v.all()
				if rank == x {
					a = v.odd()
				}
				out[rank] = tm.Run(ctx, a)
				next[rank] = tm.Barrier(ctx)
				return nil
			})
			t.Log(h.stats())
			why := false
			mustFail := map[int]bool{x: true}
			for _, p := range coll.OverlayNeighbours(n, x) {
				mustFail[p] = true
			}
			for r := range n {
				pe := peerErr(out[r])
				switch {
				case out[r] == nil && (aon || mustFail[r]):
					t.Errorf("rank %d: the mismatched collective succeeded", r)
				case out[r] == nil:
					// default outcomes: done before the news came
				case !errors.Is(out[r], coll.ErrMismatch):
					t.Errorf("rank %d: want ErrMismatch, got %v", r, out[r])
				case pe != nil && !pe.Mismatch:
					t.Errorf("rank %d: a PeerError without Mismatch: %v", r, out[r])
				case !strings.Contains(out[r].Error(), fmt.Sprintf("rank %d ", x)):
					t.Errorf("rank %d: the error does not name rank %d: %v", r, x, out[r])
				default:
					why = why || strings.Contains(out[r].Error(), "initialized collective #0 differently")
				}
				if next[r] != nil {
					t.Errorf("rank %d: the collective after the mismatch: %v", r, next[r])
				}
			}
			if !why {
				t.Errorf("no rank says the collectives differ: %v", out)
			}
			if c := h.cutOffs(); len(c) > 0 {
				t.Errorf("cut-offs: %+v", c)
			}
		})
	}
}

// TestProtoRelayedNoVoteKeepsOrigin: a no-vote passed up by a rank that reported done
// keeps the rank that voted no, so the failure names it and that rank gets its own
// timeout back. 10 ranks, radix-8 agreement tree: 9 -> 8 -> 0. Rank 9's deadline
// passes after it reported done; rank 1 finishes only once the root has sent an
// abort, so the root cannot decide success: it fails the post on rank 9's no-vote,
// relayed by rank 8.
func TestProtoRelayedNoVoteKeepsOrigin(t *testing.T) {
	const n = 10
	h := newFakeHub(t, n, fakePolicy{}, testutil.Rand(t))
	h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
		p := taskPlan{Polls: 0}
		if rank == 1 {
			p.When = func(h *fakeHub) bool { return h.abortsFrom[0] > 0 }
		}
		return p
	})
	cfg := fakeConfig()
	w := newFakeWorld(t, h, cfg)
	ctx := testCtx(t)
	reqs := make([]*coll.Request, n)
	for r := range n {
		req, err := w.teams[r].Init(barrierArgs(false))
		require.NoError(t, err)
		reqs[r] = req
		t.Cleanup(func() { _ = req.Close() })
	}
	out := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx := ctx
			if r == 9 {
				var cancel context.CancelFunc
				wctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			if err := reqs[r].Post(); err != nil {
				out[r] = err
				return
			}
			out[r] = reqs[r].Wait(wctx)
		}()
	}
	wg.Wait()
	checkAllOrNothing(t, out)
	require.Error(t, out[9])
	require.ErrorIs(t, out[9], coll.ErrTimeout, "rank 9 voted no: its own timeout comes back")
	for r := range n - 1 {
		var pe *coll.PeerError
		require.True(t, errors.As(out[r], &pe), "rank %d: %v", r, out[r])
		require.Equal(t, 9, pe.Rank, "rank %d: the failure names the rank that voted no: %v", r, out[r])
	}
}

// TestProtoDefaultOutcomes: the default mode's outcome contract (Config.AllOrNothing
// off) under adversarial schedules (RC-legal, and one reordering each peer's
// messages), with tasks that talk to every rank or to their ring neighbours only; a
// post of a task ends only once its peers posted it (their data exists). Rank f's
// task fails at post k of a persistent allreduce, at Post or after its buffers were
// exposed; every rank posts up to k+1 times. Then: f's post k fails with its own
// error; every post that succeeds had its part done before the news of a failure of
// it or an earlier post reached the rank; every other post that fails names f, and
// after post 1 only a rank whose part was not done when the news came fails; posts
// before k succeed everywhere; with every rank a peer of f, post k+1 succeeds
// nowhere; nobody is cut off, the team stays usable, and the success path sends no
// completion report or decision, and the signature check (n-1 declarations up and
// n-1 down) once per request, not per post.
func TestProtoDefaultOutcomes(t *testing.T) {
	rnd := testutil.Rand(t)
	ring := func(rank, n int) []int {
		var ps []int
		for _, p := range []int{(rank + n - 1) % n, (rank + 1) % n} {
			if p != rank && !slices.Contains(ps, p) {
				ps = append(ps, p)
			}
		}
		slices.Sort(ps)
		return ps
	}
	pols := append(append([]fakePolicy(nil), fifoPolicies...), fakePolicy{MaxDelay: 3, ReorderPeer: true})
	partial := 0
	for trial := range 24 {
		fr := failureRun{n: 2 + rnd.IntN(16), k: 1 + rnd.IntN(3), atPost: rnd.IntN(2) == 0,
			pol: pols[trial%len(pols)], statePol: rnd.IntN(6)}
		if trial%2 == 1 {
			fr.pol.TaskPeers = ring
		}
		fr.f = rnd.IntN(fr.n)
		t.Run(fmt.Sprintf("%d/n%d/f%d/k%d/atPost=%v/%v/ring=%v", trial, fr.n, fr.f, fr.k, fr.atPost, fr.pol, trial%2 == 1), func(t *testing.T) {
			partial += runDefaultOutcome(t, rnd, fr)
		})
	}
	t.Logf("%d ranks succeeded a post that failed elsewhere", partial)
}

// runDefaultOutcome runs one trial of TestProtoDefaultOutcomes and returns how many
// ranks succeeded post k.
func runDefaultOutcome(t *testing.T, rnd *rand.Rand, fr failureRun) int {
	h := newFakeHub(t, fr.n, fr.pol, rnd)
	h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
		p := taskPlan{Polls: h.intn(6), AbortPolls: h.intn(3)}
		if seq == 0 {
			// A post needs its peers' data: it ends once they posted it too.
			p.When = func(h *fakeHub) bool { return h.peersPosted0(rank, post) }
		}
		if rank == fr.f && seq == 0 && post == uint32(fr.k) {
			if fr.atPost {
				p.PostErr = errFakeTask
			} else {
				p.Polls, p.StateErr = fr.statePol, errFakeTask
			}
		}
		return p
	})
	cfg := fakeConfig()
	cfg.AllOrNothing = false
	w := newFakeWorld(t, h, cfg)
	ctx := testCtx(t)
	type result struct {
		posts []error
		next  error
	}
	res := make([]result, fr.n)
	errs := w.run(func(rank int, tm *coll.Team) error {
		ps, err := posts(ctx, tm, allreduceArgs(true, 4), fr.k+1)
		if err != nil {
			return err
		}
		res[rank].posts = ps
		res[rank].next = tm.Run(ctx, allreduceArgs(false, 2))
		return nil
	})
	t.Log(h.stats())
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Init or Close: %v", r, err)
		}
	}
	// Asked before the hub's lock is taken: a team's keeper polls the fake endpoint
	// (which takes the hub's lock) while it holds the team's lock, so asking a team
	// under the hub's lock can deadlock with it (CI hung here once in session 40).
	broken := make([]error, len(res))
	for r := range res {
		broken[r] = w.teams[r].Broken()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	succeeded := 0
	for r, rr := range res {
		if len(rr.posts) < fr.k {
			t.Fatalf("rank %d: posts stopped after %d of %d: %v", r, len(rr.posts), fr.k, rr.posts)
		}
		for p, err := range rr.posts[:fr.k-1] {
			if err != nil {
				t.Errorf("rank %d post %d (before the failure): %v", r, p+1, err)
			}
		}
		namesF := func(err error, post int) {
			pe := peerErr(err)
			if !errors.Is(err, coll.ErrPeerFailed) || pe == nil {
				t.Errorf("rank %d post %d: want a *PeerError wrapping ErrPeerFailed, got %v", r, post, err)
			} else if pe.Rank != fr.f || pe.Seq != 0 || !strings.Contains(pe.Cause, errFakeTask.Error()) {
				t.Errorf("rank %d post %d: PeerError %+v, want rank %d, collective 0, the cause", r, post, *pe, fr.f)
			}
			if errors.Is(err, coll.ErrTeamBroken) {
				t.Errorf("rank %d: a task failure broke the team: %v", r, err)
			}
		}
		// Every post that ran: a success had its part done before any news of its
		// post or an earlier one came; a failure (off f) names f and came with, or
		// after, that news (a part done first succeeds, except on the first post,
		// which also waits for the signature check).
		for p, err := range rr.posts {
			post := p + 1
			done, news := h.doneAt[[2]int{r, post}], h.newsAt(r, post)
			switch {
			case r == fr.f && post == fr.k:
				if err == nil || !errors.Is(err, errFakeTask) || errors.Is(err, coll.ErrPeerFailed) {
					t.Errorf("failing rank %d: want its own error, got %v", r, err)
				}
			case err == nil:
				if post >= fr.k {
					succeeded++
				}
				if done == 0 || news != 0 && news < done {
					t.Errorf("rank %d: post %d succeeded, but the news of a failure reached it (clock %d) before its part was done (clock %d)", r, post, news, done)
				}
			case post < fr.k:
				t.Errorf("rank %d post %d (before the failure): %v", r, post, err)
			default:
				namesF(err, post)
				if post > 1 && done != 0 && (news == 0 || done < news) {
					t.Errorf("rank %d: post %d failed (%v), though its part was done (clock %d) before the news came (clock %d)", r, post, err, done, news)
				}
			}
		}
		last := rr.posts[len(rr.posts)-1]
		switch {
		case last == nil && len(rr.posts) == fr.k+1 && fr.pol.TaskPeers == nil:
			// Every task talks to f here: post k+1 cannot succeed without it.
			t.Errorf("rank %d: post %d succeeded without rank %d", r, fr.k+1, fr.f)
		case last != nil && len(rr.posts) != fr.k && len(rr.posts) != fr.k+1:
			t.Errorf("rank %d: posted again after a failed post: %v", r, rr.posts)
		}
		if rr.next != nil {
			t.Errorf("rank %d: the collective after the failure: %v", r, rr.next)
		}
		if broken[r] != nil {
			t.Errorf("rank %d: team broken: %v", r, broken[r])
		}
	}
	if len(h.cuts) > 0 {
		t.Errorf("cut-offs after a plain task failure: %+v", h.cuts)
	}
	if h.sent[wireDone] != 0 || h.sent[wireFin] != 0 {
		t.Errorf("the default mode ran the agreement: %d completion reports, %d decisions", h.sent[wireDone], h.sent[wireFin])
	}
	// The allreduce of collective 0 and the one after, of another shape: one
	// declaration each way on every edge of the overlay, for each. A failure of
	// collective 0's first post may stop a declaration at a rank that closed it, or
	// have one answered from memory by a rank that closed it first (Team.sigLate):
	// at most one answer per declaration.
	want := 2 * (fr.n - 1)
	up, down := h.sent[wireSigUp], h.sent[wireSigOK]
	if up > 2*want || down > 2*want || fr.k > 1 && (up != want || down != want) {
		t.Errorf("signature check: %d declarations up and %d down, want %d each (at most twice that where the first post fails)", up, down, want)
	}
	return succeeded
}

// TestProtoAbortScales: in a team of 64 whose tasks talk to their ring neighbours
// only, one rank's failure reaches every rank, through the overlay tree and the task
// peers, with O(n) messages: every rank fails the post with a PeerError naming it,
// nobody is cut off, and the aborts and acknowledgements sent in all stay far below
// the n·(n-1) of a full-mesh flood (each rank forwards the news once, to at most its
// overlay neighbours and its two task peers, and answers each abort once).
func TestProtoAbortScales(t *testing.T) {
	const n = 64
	ring := func(rank, n int) []int {
		ps := []int{(rank + n - 1) % n, (rank + 1) % n}
		slices.Sort(ps)
		return ps
	}
	rnd := testutil.Rand(t)
	for _, aon := range []bool{false, true} {
		t.Run(fmt.Sprintf("all-or-nothing=%v", aon), func(t *testing.T) {
			f := rnd.IntN(n)
			h := newFakeHub(t, n, fakePolicy{MaxDelay: 2, CrossPeer: true, TaskPeers: ring}, rnd)
			h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
				p := taskPlan{Polls: 2, AbortPolls: 1}
				if rank == f {
					p.Polls, p.StateErr = 1, errFakeTask
				} else {
					p.Polls = -1 // every other rank waits for the failed one
				}
				return p
			})
			cfg := fakeConfig()
			cfg.AllOrNothing = aon
			w := newFakeWorld(t, h, cfg)
			ctx := testCtx(t)
			out := make([]error, n)
			errs := w.run(func(rank int, tm *coll.Team) error {
				ps, err := posts(ctx, tm, allreduceArgs(false, 4), 1)
				if len(ps) == 1 {
					out[rank] = ps[0]
				}
				return err
			})
			t.Log(h.stats())
			for r := range n {
				require.NoError(t, errs[r], "rank %d: Init or Close", r)
				if r == f {
					require.ErrorIs(t, out[r], errFakeTask)
					continue
				}
				pe := peerErr(out[r])
				require.NotNil(t, pe, "rank %d: %v", r, out[r])
				require.Equal(t, f, pe.Rank, "rank %d: %v", r, out[r])
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			require.Empty(t, h.cuts)
			aborts := h.sent[wireAbort]
			t.Logf("n=%d: %d aborts and acknowledgements in all (a full-mesh flood: %d, and as many acknowledgements)", n, aborts, n*(n-1))
			require.Less(t, aborts, 20*n, "the abort's messages do not scale as O(n)")
		})
	}
}
