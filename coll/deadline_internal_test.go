package coll

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeadlineCtxStaysEnded: a context derived from the waiter's deadline context (as
// tlmlx5's wait on several CQs derives one) sees it end with DeadlineExceeded even when
// the team arms its next wait at once: the ended context stays ended, Err included,
// and the next wait gets a fresh one. Until session 34 the team armed the same object
// again, its Err went back to nil, and the derived context's watcher goroutine, reading
// Err after Done closed, panicked ("context: internal error: missing cancel error").
func TestDeadlineCtxStaysEnded(t *testing.T) {
	tm := &Team{dctx: newDeadlineCtx()}
	tm.kickDctx = func() { tm.dctx.kick() }
	for i := range 100 {
		c := tm.armDctx(time.Now().Add(time.Hour))
		require.False(t, c.spent(), "wait %d starts on an armed context", i)
		child, cancel := context.WithTimeout(c, time.Hour)
		if i%2 == 0 {
			tm.kickDctx()
		} else {
			c.arm(time.Now()) // the deadline passes
			<-c.Done()
		}
		next := tm.armDctx(time.Now().Add(time.Hour))
		require.NotSame(t, c, next, "wait %d: the ended context is not armed again", i)
		require.ErrorIs(t, c.Err(), context.DeadlineExceeded, "wait %d: an ended context stays ended", i)
		<-child.Done()
		require.ErrorIs(t, child.Err(), context.DeadlineExceeded)
		cancel()
		next.disarm()
	}
	// Not ended, it is armed again: no allocation per wait.
	c := tm.armDctx(time.Now().Add(time.Hour))
	c.disarm()
	require.Same(t, c, tm.armDctx(time.Now().Add(time.Hour)))
	tm.dctx.disarm()
}
