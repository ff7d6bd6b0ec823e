package coll

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Progress and waiting: every call that moves requests along polls the transport
// under the team lock (progressLocked); Wait spins briefly, then one goroutine at a
// time blocks in the transport's WaitEvent while the others wait behind it.

// progressLocked polls the transport once and advances every live request.
func (t *Team) progressLocked() { t.progressAt(new(clock)) }

// progressAt is progressLocked with the clock of the caller's pass: Post's, read as it
// started the post, serves the poll that ends it. It is older by what Post did since
// (a staged copy-in, the transport's post), which only makes that poll's time checks
// (deadline, abort grace, the signature's delay) later, never earlier; the Wait that
// follows reads the clock afresh at every poll and wakes at wakeAt.
func (t *Team) progressAt(clk *clock) {
	if t.closed {
		return
	}
	t.takeInbox()
	if err := t.tl.Poll(handler{t}); err != nil && t.broken == nil {
		t.setBroken(err)
	}
	if err := t.tl.Broken(); err != nil && t.broken == nil && !t.onlyLeftDown() {
		t.setBroken(err)
	}
	for len(t.mailboxGone) > 0 {
		g := t.mailboxGone[0]
		t.mailboxGone = t.mailboxGone[1:]
		// Its team closed: it takes part in nothing that still needs a new link (from
		// g.from on, where its transport said when; else from 0).
		t.peerLeft(g.rank, g.from, g.exact, g.cause)
	}
	if !t.background {
		t.calls++
	}
	// Read once, and only where a request needs the time: a collective that finished
	// in this poll needs none, and a read costs 50 ns here, hundreds of ns in an
	// emulated guest.
	for _, r := range t.live {
		r.advance(clk)
	}
	if t.waiting && t.local != nil && t.local.LocalWork() {
		// The transport has more to do at its next Poll, which no completion will
		// announce: a goroutine asleep in its WaitEvent (this one posted, or polled
		// from Test) must come back for it.
		t.kickWaiter()
	}
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// onlyLeftDown reports whether every peer whose link is down closed its team
// (t.left): a send to a rank that closed fails on the transport (an eager message goes
// without an invitation), and the collectives from the one it left on already fail
// naming it; the rest of the team still works.
func (t *Team) onlyLeftDown() bool {
	for p := 0; p < t.size; p++ {
		if _, left := t.left[p]; p != t.rank && !left && t.tl.PeerDown(p) {
			return false
		}
	}
	return true
}

// deliverBacklog polls, before Wait returns, while the transport still holds messages
// behind a full send queue (Backlog, where it says) and they keep leaving: a rank
// whose Wait returned polls no more, and its peers may need what is queued there (the
// decision it just sent, behind thousands of acknowledgements in
// TestRegressionSeq16Wrap). It polls for up to backlogStall without progress and
// backlogMax in all, and leaves what is still queued then to the drainer
// (drainLater). A broken team delivers too: what it still queues goes to live peers (a
// down peer's queue is dropped), and it may be the news they wait for. Normally
// nothing is queued and it costs one call.
func (t *Team) deliverBacklog() {
	if t.drainDone != nil {
		return // the drainer is on it: its peers did not poll for backlogStall already
	}
	if t.pushBacklog() > 0 {
		t.drainLater()
	}
}

// backlogger is a transport that queues messages behind full send queues and says
// how many wait there: they leave only while someone polls the team.
type backlogger interface{ Backlog() int }

// settle ends every call that may have queued messages and does not wait for them to
// leave (Init, Post, Test, Request.Close): what is still queued leaves from the
// drainer, since the caller may not call again. The hour soak found two such cases:
// a broken rank whose every post is refused sends the news of each refusal and never
// polls again, and children of the agreement waited their whole deadline for that
// news, queued behind 20-30 earlier refusals; and a Test loop that ends polls no more,
// though the relays it queued on the way may be what a peer waits for (a rank 0 with
// 23 messages queued and no drainer running).
func (t *Team) settle() {
	if t.drainDone != nil || t.closed {
		return
	}
	if b, ok := t.tl.(backlogger); ok && b.Backlog() > 0 {
		t.drainLater()
	}
}

// pushBacklog is deliverBacklog's own polling; it returns what is still queued.
func (t *Team) pushBacklog() int {
	b, ok := t.tl.(backlogger)
	if !ok {
		return 0
	}
	last := b.Backlog()
	if last == 0 {
		return 0 // the usual case, without reading the clock
	}
	start := time.Now()
	since := start
	for last > 0 && !t.closed && time.Since(since) < backlogStall && time.Since(start) < backlogMax {
		t.progressLocked()
		if n := b.Backlog(); n < last {
			last, since = n, time.Now()
		}
	}
	return last
}

// drainLater starts, unless one runs, a goroutine that polls the team every
// backlogTick until its backlog is gone, the team closes, or the Timeout and
// AbortGrace passed: no call of the caller's may come to poll it.
func (t *Team) drainLater() {
	b, ok := t.tl.(backlogger)
	if !ok || t.drainDone != nil || t.closed {
		return
	}
	wait := t.cfg.Timeout
	if wait <= 0 {
		wait = DefaultTimeout
	}
	stop, done := make(chan struct{}), make(chan struct{})
	t.drainStop, t.drainDone = stop, done
	go t.drainer(b, stop, done, time.Now().Add(wait+t.cfg.AbortGrace))
}

func (t *Team) drainer(b backlogger, stop, done chan struct{}, until time.Time) {
	defer close(done)
	tick := time.NewTicker(backlogTick)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		t.mu.Lock()
		if t.drainDone != done {
			t.mu.Unlock() // Close took it over
			return
		}
		if t.closed || b.Backlog() == 0 || time.Now().After(until) {
			t.drainStop, t.drainDone = nil, nil
			t.mu.Unlock()
			return
		}
		t.background = true
		t.progressLocked()
		t.background = false
		if t.waiting {
			// What this poll took from the transport may have finished the post of a
			// goroutine asleep in the transport's wait: it looks again.
			t.kickWaiter()
		}
		t.mu.Unlock()
	}
}

// driving counts the goroutines of this process, over every team, that are in waitFor
// and not blocked: each wants a core to poll on.
var driving atomic.Int32

// spinMore reports whether a waiter that has polled spins times since it last blocked,
// the first of them at start, polls again before it blocks: spinPolls times, and while
// no more goroutines drive progress than the process runs at once, for free (the
// team's spinFreeFor). runtime.GOMAXPROCS takes the scheduler's lock, as the yield
// after each poll does; reading it once per wait instead measured faster for some
// 8-rank gathers on an H100 and slower for scatters (docs/design.md, "Yielding on many
// cores"), so it stays here.
func spinMore(spins int, start time.Time, free time.Duration) bool {
	if spins < spinPolls {
		return true
	}
	return int(driving.Load()) <= runtime.GOMAXPROCS(0) && time.Since(start) < free
}

// waitFor drives progress until r's post is finished.
func (t *Team) waitFor(ctx context.Context, r *Request) error {
	driving.Add(1)
	defer driving.Add(-1)
	spins := 0
	var spinStart time.Time
	for {
		t.mu.Lock()
		if r.state == sStalled {
			// An injected stall: this rank neither moves nor reads anything until its
			// deadline.
			d := r.deadline
			t.mu.Unlock()
			driving.Add(-1)
			err := sleepUntil(ctx, d)
			driving.Add(1)
			if err != nil {
				t.mu.Lock()
				r.fail(r.ctxError(err))
				t.mu.Unlock()
			} else {
				t.mu.Lock()
				r.advance(new(clock))
				t.mu.Unlock()
			}
			continue
		}
		t.progressLocked()
		if r.state == sDone {
			t.deliverBacklog()
			err := r.err
			t.mu.Unlock()
			return err
		}
		if err := ctx.Err(); err != nil {
			now := time.Now()
			if r.ctxErr == nil {
				r.ctxErr = err
			}
			if r.deadline.IsZero() || r.deadline.After(now) {
				r.deadline = now
			}
			if r.state != sAborting && !r.lateDecision(now) {
				r.fail(r.ctxError(err))
			}
			// The abort still waits, bounded by AbortGrace, for the peers'
			// acknowledgements: the caller's ctx no longer bounds it.
			ctx = context.Background()
			t.mu.Unlock()
			continue
		}
		wake := r.wakeAt()
		if spins == spinPolls {
			spinStart = time.Now() // the free spin's start: the first polls need no clock
		}
		if spinMore(spins, spinStart, t.spinFree) {
			spins++
			t.mu.Unlock()
			if spins%yieldEvery == 0 {
				runtime.Gosched()
			}
			continue
		}
		spins = 0
		if !t.waiting {
			t.waiting = true
			kicks := t.kicks
			t.mu.Unlock()
			driving.Add(-1)
			err := t.waitEvent(ctx, wake, kicks)
			driving.Add(1)
			t.mu.Lock()
			t.waiting = false
			if t.changed != nil {
				close(t.changed)
				t.changed = nil
			}
			t.mu.Unlock()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.mu.Lock()
				t.setBroken(fmt.Errorf("waiting for completions: %w", err))
				t.mu.Unlock()
			}
			continue
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		ch := t.changed
		t.mu.Unlock()
		driving.Add(-1)
		waitBehind(ctx, ch, wake)
		driving.Add(1)
	}
}

// waitEvent blocks in the transport until an event, ctx's end, wake (zero: none; at
// most transportWakeMax from now either way) or a kick (kickWaiter): a peer's death is
// no transport event, and the waiter must not sleep through it. kicks is the count the
// caller saw when it took the waiter role; a kick since then returns at once.
func (t *Team) waitEvent(ctx context.Context, wake time.Time, kicks uint64) error {
	if limit := time.Now().Add(transportWakeMax); wake.IsZero() || wake.After(limit) {
		wake = limit
	}
	d, has := ctx.Deadline()
	var wctx context.Context
	var cancel context.CancelFunc // nil when the team's reusable dctx is used
	switch {
	case has && !d.After(wake):
		wctx, cancel = context.WithCancel(ctx)
	case ctx.Done() == nil:
		wctx = t.armDctx(wake)
	default:
		wctx, cancel = context.WithDeadline(ctx, wake)
	}
	stop := cancel
	if cancel == nil {
		defer t.dctx.disarm()
		stop = t.kickDctx
	} else {
		defer cancel()
	}
	t.mu.Lock()
	if t.kicks != kicks {
		t.mu.Unlock()
		return nil
	}
	t.stopWait = stop
	t.mu.Unlock()
	err := t.tl.WaitEvent(wctx)
	t.mu.Lock()
	t.stopWait = nil
	t.mu.Unlock()
	return err
}

// kickWaiter ends the transport wait of the goroutine that holds the waiter role, so
// that it looks at the team again; called under t.mu after a change that no
// transport event announces.
func (t *Team) kickWaiter() {
	t.kicks++
	if t.stopWait != nil {
		t.stopWait()
	}
}

func waitBehind(ctx context.Context, ch chan struct{}, wake time.Time) {
	var tc <-chan time.Time
	if !wake.IsZero() {
		tm := time.NewTimer(time.Until(wake))
		defer tm.Stop()
		tc = tm.C
	}
	select {
	case <-ch:
	case <-ctx.Done():
	case <-tc:
	}
}

func sleepUntil(ctx context.Context, d time.Time) error {
	if d.IsZero() {
		<-ctx.Done()
		return ctx.Err()
	}
	tm := time.NewTimer(time.Until(d))
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// deadlineCtx is a context.Context that ends at a deadline or a kick, armed again for
// every blocking wait of the progress loop until it ends: the loop needs a context
// with the collective's deadline for every blocking wait, context.WithDeadline
// allocates, and a persistent collective must not. Once ended it stays ended, Err
// included, as the Context contract wants: a context derived from it (tlmlx5's wait on
// several CQs derives one) has a goroutine that reads Err after Done closed, at any
// later time, and until session 34 a wait armed again meanwhile made that Err nil and
// the goroutine panicked ("context: internal error: missing cancel error"). The team
// takes a fresh one for the next wait instead (spent). Only the goroutine that holds
// the team's waiter role arms it.
type deadlineCtx struct {
	mu    sync.Mutex
	d     time.Time
	ch    chan struct{}
	fired bool
	timer *time.Timer
}

func newDeadlineCtx() *deadlineCtx {
	c := &deadlineCtx{ch: make(chan struct{})}
	c.timer = time.AfterFunc(time.Hour, c.fire)
	c.timer.Stop()
	return c
}

// armDctx arms the team's deadline context for a wait until wake and returns it: a
// fresh one when the last one ended (spent).
func (t *Team) armDctx(wake time.Time) *deadlineCtx {
	if t.dctx.spent() {
		t.dctx = newDeadlineCtx()
	}
	t.dctx.arm(wake)
	return t.dctx
}

// arm sets the deadline of the next wait; c must not be spent.
func (c *deadlineCtx) arm(d time.Time) {
	c.mu.Lock()
	c.d = d
	c.mu.Unlock()
	c.timer.Reset(time.Until(d))
}

// spent reports whether c has ended (deadline or kick): it cannot be armed again.
func (c *deadlineCtx) spent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fired
}

func (c *deadlineCtx) disarm() { c.timer.Stop() }

// kick ends the current wait at once, deadline or not.
func (c *deadlineCtx) kick() {
	c.mu.Lock()
	if !c.fired {
		close(c.ch)
		c.fired = true
	}
	c.mu.Unlock()
}

func (c *deadlineCtx) fire() {
	c.mu.Lock()
	if !c.fired && !time.Now().Before(c.d) {
		close(c.ch)
		c.fired = true
	}
	c.mu.Unlock()
}

func (c *deadlineCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.d, true
}

func (c *deadlineCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ch
}

func (c *deadlineCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fired {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *deadlineCtx) Value(any) any { return nil }
