package coll_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
)

// TestAllocDMLifecycle: a DM buffer from Context.AllocDM belongs to the caller, who
// closes it before the context: Close refuses (ErrBusy) while one is open and works on
// a retry; AllocDM on a closed context fails with ErrClosed.
func TestAllocDMLifecycle(t *testing.T) {
	c, err := coll.NewContext(coll.Config{Device: device(), DMCapacity: 16 << 10})
	require.NoError(t, err)
	b, err := c.AllocDM(100)
	if err != nil {
		require.ErrorIs(t, err, coll.ErrNotSupported, "a device without device memory says so")
		require.NoError(t, c.Close())
		t.Logf("%s gives no device memory: %v", device(), err)
		return
	}
	require.Equal(t, mem.DM, b.Type())
	require.Equal(t, 100, b.Len())
	require.ErrorIs(t, c.Close(), coll.ErrBusy)
	require.NoError(t, b.Close())
	require.NoError(t, c.Close())
	_, err = c.AllocDM(100)
	require.ErrorIs(t, err, coll.ErrClosed)
}
