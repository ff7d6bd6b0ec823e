package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestWaitDeadlineOverridesTimeout: Config.Timeout bounds only a post whose Wait has
// no deadline; a Wait's own deadline replaces it, later or not. Rank 1 reaches the
// barrier several Timeouts after rank 0 posted it, well within rank 0's Wait
// deadline: both succeed. (The sleep only makes rank 1 late; no assertion is about
// time, and the Wait deadlines are hang guards.)
func TestWaitDeadlineOverridesTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	w := newWorld(t, 2, coll.Config{Timeout: timeout})
	errs := w.run(func(r *rank) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if r.r == 1 {
			time.Sleep(4 * timeout) // rank 0's Config.Timeout passes meanwhile
		}
		return r.team.Barrier(ctx)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d: the Wait's deadline, not Config.Timeout, bounds the post", r)
	}
}
