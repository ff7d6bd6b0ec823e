package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestWaitReturnsToTransport: a rank that waits long for a peer leaves the transport's
// WaitEvent at least every TransportWakeMax, so that the transport reads what no
// completion announces (tlmlx5: a device's asynchronous events, a DEVICE_FATAL whose
// device ends no work request) while the collective waits, and not only at its
// deadline (30 s here). Before, the wait lasted until the deadline or a completion.
func TestWaitReturnsToTransport(t *testing.T) {
	h := newFakeHub(t, 2, fakePolicy{}, testutil.Rand(t))
	cfg := fakeConfig()
	cfg.Timeout = 30 * time.Second
	w := newFakeWorld(t, h, cfg)
	errs := w.run(func(rank int, tm *coll.Team) error {
		if rank == 1 {
			time.Sleep(3 * coll.TransportWakeMax) // rank 0 waits in its Barrier meanwhile
		}
		return tm.Barrier(context.Background())
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Positive(t, h.waits, "rank 0 never waited in the transport: the test checked nothing")
	require.Zero(t, h.unbounded, "a WaitEvent without a deadline")
	require.LessOrEqual(t, h.waitMax, coll.TransportWakeMax)
	t.Logf("%d waits, the longest allowed %v", h.waits, h.waitMax)
}
