package coll

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Progress and waiting: every call that moves requests along polls the transport
// under the team lock (progressLocked); Wait spins briefly, then one goroutine at a
// time blocks in the transport's WaitEvent while the others wait behind it.

// progressLocked polls the transport once and advances every live request.
func (t *Team) progressLocked() {
	if t.closed {
		return
	}
	if err := t.tl.Poll(handler{t}); err != nil && t.broken == nil {
		t.setBroken(err)
	}
	if err := t.tl.Broken(); err != nil && t.broken == nil {
		t.setBroken(err)
	}
	now := time.Now()
	for _, r := range t.reqs {
		r.advance(now)
	}
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// waitFor drives progress until r's post is finished.
func (t *Team) waitFor(ctx context.Context, r *Request) error {
	spins := 0
	for {
		t.mu.Lock()
		if r.state == sStalled {
			// An injected stall: this rank neither moves nor reads anything until its
			// deadline.
			d := r.deadline
			t.mu.Unlock()
			if err := sleepUntil(ctx, d); err != nil {
				t.mu.Lock()
				r.fail(r.ctxError(err))
				t.mu.Unlock()
			} else {
				t.mu.Lock()
				r.advance(time.Now())
				t.mu.Unlock()
			}
			continue
		}
		t.progressLocked()
		if r.state == sDone {
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
		wake := t.copyInWake(r.wakeAt())
		if spins < spinPolls {
			spins++
			t.mu.Unlock()
			runtime.Gosched()
			continue
		}
		spins = 0
		if !t.waiting {
			t.waiting = true
			t.mu.Unlock()
			err := t.waitEvent(ctx, wake)
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
		waitBehind(ctx, ch, wake)
	}
}

// copyInWake brings wake forward to the next copy-in poll while any request of the
// team needs one (pollForCopyIn): a waiter of one request drives the progress of all,
// and a peer may wait for another request's data.
func (t *Team) copyInWake(wake time.Time) time.Time {
	poll := false
	for _, q := range t.reqs {
		if q.pollForCopyIn() {
			poll = true
		}
	}
	if !poll {
		return wake
	}
	next := time.Now().Add(copyInPoll)
	if wake.IsZero() || next.Before(wake) {
		return next
	}
	return wake
}

// waitEvent blocks in the transport until an event, ctx's end or wake (zero: none).
func (t *Team) waitEvent(ctx context.Context, wake time.Time) error {
	d, has := ctx.Deadline()
	switch {
	case wake.IsZero() || (has && !d.After(wake)):
		return t.tl.WaitEvent(ctx)
	case ctx.Done() == nil:
		t.dctx.arm(wake)
		err := t.tl.WaitEvent(t.dctx)
		t.dctx.disarm()
		return err
	}
	wctx, cancel := context.WithDeadline(ctx, wake)
	defer cancel()
	return t.tl.WaitEvent(wctx)
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

// deadlineCtx is a reusable context.Context that ends at a deadline. The progress loop
// needs a context with the collective's deadline for every blocking wait, and
// context.WithDeadline allocates; a persistent collective must not. Only the goroutine
// that holds the team's waiter role arms it.
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

func (c *deadlineCtx) arm(d time.Time) {
	c.mu.Lock()
	if c.fired {
		c.ch = make(chan struct{})
		c.fired = false
	}
	c.d = d
	c.mu.Unlock()
	c.timer.Reset(time.Until(d))
}

func (c *deadlineCtx) disarm() { c.timer.Stop() }

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
