package coll

import (
	"time"

	"github.com/ibcoll/ibcoll/coll/driver"
)

// The keeper: a team's own polls while no call of the caller's polls it, so that a
// rank whose program computes between collectives still answers its peers.

// startKeeper starts the goroutine that polls the team while no call of the caller's
// does (keeper). Called under t.mu once the team is made.
func (t *Team) startKeeper() {
	period := t.cfg.AbortGrace / keepFraction
	if period <= 0 {
		period = DefaultAbortGrace / keepFraction
	}
	t.keepStop, t.keepDone = make(chan struct{}), make(chan struct{})
	go t.keeper(t.keepStop, t.keepDone, period, t.calls)
}

// keeper polls the team every period while no call of the caller's polled it for
// that long and no goroutine is asleep in the transport's wait for it. The library
// otherwise polls only in its callers' calls, and a rank whose program computes
// between collectives answers nothing meanwhile: a peer whose post failed waits for
// the acknowledgement of every rank it exposed a buffer to (a gather root's
// ready-to-receive to a leaf that has not reached the gather yet), and cuts off one
// silent past AbortGrace, breaking the team. Polled, the idle rank reads the news
// (its own post of that collective will fail at once, before it writes anything) and
// answers within half a period of its last call: while calls come, the keeper looks
// every quarter period (keepActiveFraction), and the first look that finds none since
// the one before polls. That is an eighth of the grace by default. A rank with a
// stalled post (the stall fault) is left alone: it stands for one that reads nothing. Its polls, like the drainer's, apply
// no deadline (Request.advance): a post's deadline is Config.Timeout from its Post,
// which the ctx deadline of the Wait to come replaces, and a call of the caller's
// enforces it.
func (t *Team) keeper(stop, done chan struct{}, period time.Duration, seen uint64) {
	defer close(done)
	counter, _ := t.tl.(driver.Counter)
	tm := time.NewTimer(period)
	defer tm.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tm.C:
		}
		next := period
		t.mu.Lock()
		if t.keepDone != done || t.closed {
			t.mu.Unlock()
			return
		}
		idle := t.calls == seen // no call of the caller's polled since the last tick
		seen = t.calls
		if !idle {
			next = period / keepActiveFraction
		}
		if !t.waiting && idle && !t.stalled() {
			queued := t.backlog()
			var before uint64
			if counter != nil {
				before = counter.Completions()
			}
			t.background = true
			t.progressLocked()
			t.background = false
			t.keeperPolls++
			if t.backlog() > queued {
				// What this poll queued (answers, relays) leaves from the drainer; a
				// backlog the drainer gave up on (its peers read nothing for Timeout
				// and AbortGrace) is not taken up again at every period.
				t.settle()
			}
			if counter != nil && counter.Completions() != before {
				// Messages came: more may wait behind them at the peers, who send as
				// fast as this rank re-posts receives and returns credits (a peer's
				// abort queued behind its eager messages for collectives this rank
				// has not reached). Poll again soon, until a poll finds nothing.
				next = keepQuick
			}
		}
		t.mu.Unlock()
		tm.Reset(next)
	}
}

// backlog is what the transport holds behind full send queues (backlogger), 0 where
// it does not say.
func (t *Team) backlog() int {
	if b, ok := t.tl.(backlogger); ok {
		return b.Backlog()
	}
	return 0
}

// stalled reports whether a post of the team is stalled (the stall fault).
func (t *Team) stalled() bool {
	for _, r := range t.reqs {
		if r.state == sStalled {
			return true
		}
	}
	return false
}
