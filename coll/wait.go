package coll

import (
	"context"
	"sync"
	"time"
)

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
