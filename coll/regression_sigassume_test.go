package coll_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// Regressions of the signature check's assumptions (sigEdge), found by review in
// session 37 on its first version, each of which waited out the deadline there.

// TestRegressionSigStaleAssume: two consecutive mismatched collectives initialized ahead.
// Rank 0 (overlay root) runs c, a, c, c; rank 1 runs c, a, a, a (c = reduce root 0,
// a = bcast root 0). Rank 0 inits #2 and #3 before rank 1's declaration of #1
// arrives (so it still "knows" rank 1 at c); rank 1 inits #2 and #3 after rank 0's
// declaration of #1 (a) but before rank 0's of #2. Neither declares at #3, each
// assumes the other's: #3 passes the check on both. A reduce root and a bcast leaf
// both wait for data that never comes (fake: Polls -1), so #3 ended at the deadline.
// Now a rank assumes a neighbour's signature only once the neighbour declared at or
// after this rank's own last declaration on the edge (sigEdge.toldSeq).
func TestRegressionSigStaleAssume(t *testing.T) {
	p := newSigPair(t, func(seq uint64, post uint32) bool { return seq >= 2 }) // a data deadlock: neither sends what the other waits for
	w, h, ctx, c, a, init, reqs := p.w, p.h, p.ctx, p.c, p.a, p.init, &p.reqs
	init(0, 1, a(0))   // rank 0 declares a@1
	h.hold(1, 0, true) // rank 1's declarations stay on the wire
	init(1, 1, a(1))   // rank 1 declares a@1 (held)
	if err := reqs[1][1].Post(); err != nil {
		t.Fatal(err)
	}
	if err := reqs[1][1].Wait(ctx); err != nil { // rank 0's a@1 came: known = a
		t.Fatalf("#1 rank 1: %v", err)
	}
	h.hold(0, 1, true)
	init(0, 2, c(0)) // declares c@2 (held), assumes rank 1's c (its last learned)
	init(0, 3, c(0)) // nothing declared, assumed
	init(1, 2, a(1)) // nothing declared, assumed
	init(1, 3, a(1)) // nothing declared, assumed
	h.hold(0, 1, false)
	h.hold(1, 0, false)
	if err := reqs[0][1].Post(); err != nil {
		t.Fatal(err)
	}
	if err := reqs[0][1].Wait(ctx); err != nil {
		t.Fatalf("#1 rank 0: %v", err)
	}
	for k := 2; k <= 3; k++ {
		errs := w.run(func(r int, tm *coll.Team) error {
			perr := reqs[r][k].Post() // a failed Post still needs its Wait
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if err := reqs[r][k].Wait(wctx); err != nil || perr != nil {
				return errors.Join(perr, err)
			}
			return nil
		})
		for r, err := range errs {
			t.Logf("#%d rank %d: %v", k, r, err)
		}
		requireMismatch(t, errs)
	}
}

// TestRegressionSigRefusedInitGap: rank 1's Init of #2 is refused (bad Root), which
// drops rank 0's stashed declaration of #2 unanswered and uncompared; #3 then differs
// (rank 0 reduce, rank 1 bcast) and neither declared: both waited for the deadline.
func TestRegressionSigRefusedInitGap(t *testing.T) {
	p := newSigPair(t, func(seq uint64, post uint32) bool { return seq >= 2 })
	w, h, ctx, c, a, init, reqs := p.w, p.h, p.ctx, p.c, p.a, p.init, &p.reqs
	h.hold(1, 0, true)
	init(0, 1, a(0)) // declares a@1
	init(0, 2, c(0)) // declares c@2; assumes rank 1's c (learned at #0)
	init(0, 3, c(0)) // nothing declared, assumed
	init(1, 1, a(1))
	if err := reqs[1][1].Post(); err != nil {
		t.Fatal(err)
	}
	if err := reqs[1][1].Wait(ctx); err != nil { // a@1 learned, c@2 stashed
		t.Fatalf("#1 rank 1: %v", err)
	}
	bad := c(1)
	bad.Root = 5
	if _, err := w.teams[1].Init(bad); err == nil { // #2 refused: the stash is dropped
		t.Fatal("bad Init accepted")
	}
	init(1, 3, a(1)) // told a, known a: nothing declared, assumed
	h.hold(1, 0, false)
	errs := w.run(func(r int, tm *coll.Team) error {
		perr := reqs[r][3].Post() // a failed Post still needs its Wait
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := reqs[r][3].Wait(wctx); err != nil || perr != nil {
			return errors.Join(perr, err)
		}
		return nil
	})
	for r, err := range errs {
		t.Logf("#3 rank %d: %v", r, err)
	}
	requireMismatch(t, errs)
}

// TestRegressionSigPersistentLateDecl: rank 1 runs a persistent collective whose first
// post passed on an assumed signature; rank 0's declaration of a different signature
// reaches it during its second post. Rank 1 fails post 2 and floods "post 2 failed";
// rank 0, still in post 1 and waiting for rank 1's signature, took that as news of a
// future post, and nobody answered its declaration: it waited for its deadline. Now
// the declarer is told directly (Team.tellMismatch) whenever post 1 is over here.
func TestRegressionSigPersistentLateDecl(t *testing.T) {
	p := newSigPair(t, func(seq uint64, post uint32) bool { return seq == 1 && post >= 2 }) // rank 1's post 2 is still moving data
	w, h, ctx, c, a := p.w, p.h, p.ctx, p.c, p.a
	h.hold(0, 1, true)
	r0, err := w.teams[0].Init(a(0)) // declares a@1 (held)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r0.Close() })
	pa := c(1)
	pa.Flags |= coll.Persistent
	r1, err := w.teams[1].Init(pa) // told c, known c: nothing declared, assumed
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r1.Close() })
	if err := r1.Post(); err != nil {
		t.Fatal(err)
	}
	if err := r1.Wait(ctx); err != nil {
		t.Fatalf("rank 1 post 1: %v", err)
	}
	if err := r1.Post(); err != nil { // post 2, in flight
		t.Fatal(err)
	}
	h.hold(0, 1, false)
	errs := w.run(func(r int, tm *coll.Team) error {
		req := []*coll.Request{r0, r1}[r]
		var perr error
		if r == 0 {
			perr = req.Post()
		}
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := req.Wait(wctx); err != nil || perr != nil {
			return errors.Join(perr, err)
		}
		return nil
	})
	for r, err := range errs {
		t.Logf("#1 rank %d: %v", r, err)
	}
	requireMismatch(t, errs)
}

// sigPair is a team of two over the fake transport, whose tasks never finish where
// stuck says so, after one reduce (c) that both ranks ran: the setting of the
// regressions above.
type sigPair struct {
	h    *fakeHub
	w    *fakeWorld
	ctx  context.Context
	c, a func(r int) coll.Args // a reduce and a bcast, both rooted at 0
	reqs [2][4]*coll.Request
	t    *testing.T
}

func newSigPair(t *testing.T, stuck func(seq uint64, post uint32) bool) *sigPair {
	p := &sigPair{t: t, h: newFakeHub(t, 2, fakePolicy{}, testutil.Rand(t))}
	p.h.setPlan(func(rank int, seq uint64, post uint32) taskPlan {
		if stuck(seq, post) {
			return taskPlan{Polls: -1}
		}
		return taskPlan{}
	})
	cfg := fakeConfig()
	cfg.AllOrNothing = false
	cfg.Timeout = 2 * time.Second
	p.w = newFakeWorld(t, p.h, cfg)
	p.ctx = testCtx(t)
	p.c = func(r int) coll.Args { return rootedArgs(coll.Reduce, 0, r, 2, 8) }
	p.a = func(r int) coll.Args { return rootedArgs(coll.Bcast, 0, r, 2, 8) }
	for r, err := range p.w.run(func(r int, tm *coll.Team) error { return tm.Run(p.ctx, p.c(r)) }) {
		if err != nil {
			t.Fatalf("#0 rank %d: %v", r, err)
		}
	}
	return p
}

// init initializes collective k on rank r, closed at the test's end.
func (p *sigPair) init(r, k int, args coll.Args) {
	req, err := p.w.teams[r].Init(args)
	if err != nil {
		p.t.Fatalf("init #%d rank %d: %v", k, r, err)
	}
	p.reqs[r][k] = req
	p.t.Cleanup(func() {
		if err := req.Close(); err != nil {
			p.t.Logf("close #%d rank %d: %v", k, r, err)
		}
	})
}
