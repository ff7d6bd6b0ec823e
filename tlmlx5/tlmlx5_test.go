package tlmlx5

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

func TestMain(m *testing.M) {
	testutil.LeakCheck(m, verbs.CheckLeaks, func() error {
		if n := mem.Live(); n != 0 {
			return fmt.Errorf("%d mem buffers open", n)
		}
		return nil
	})
}

func TestPieces(t *testing.T) {
	require.Equal(t, [][2]int{{2, 5}}, pieces(2, 5))
	require.Equal(t, [][2]int{{2, 3}, {3, 5}}, pieces(2, 5, 3))
	require.Equal(t, [][2]int{{2, 3}, {3, 4}, {4, 5}}, pieces(2, 5, 4, 3))
	require.Equal(t, [][2]int{{2, 5}}, pieces(2, 5, 2, 5, 9))
}

// TestRegCache: registrations are shared while used, kept for slices and Buffers,
// dropped for raw addresses and for freed Buffers, and all released at close.
func TestRegCache(t *testing.T) {
	dev, err := verbs.Open(os.Getenv(verbs.DeviceEnv))
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	defer pd.Close()
	c := newRegCache(pd)
	s := make([]byte, 4096)
	e1, err := c.acquire(s, nil, 0, 0, nil)
	require.NoError(t, err)
	e2, err := c.acquire(s, nil, 0, 0, func() error { t.Fatal("a hit must not register"); return nil })
	require.NoError(t, err)
	require.Same(t, e1, e2)
	require.NoError(t, c.release(e1))
	require.NoError(t, c.release(e2))
	require.Len(t, c.idle, 1, "a slice stays registered")

	b, err := mem.Alloc(mem.Host, 8192)
	require.NoError(t, err)
	e3, err := c.acquire(nil, b, 0, 0, nil)
	require.NoError(t, err)
	require.NoError(t, c.release(e3))
	require.Len(t, c.idle, 2)
	require.NoError(t, b.Close())
	c.sweep()
	require.Len(t, c.idle, 1, "a freed Buffer's registration is dropped")

	raw, err := mem.Alloc(mem.Host, 4096)
	require.NoError(t, err)
	defer raw.Close()
	e4, err := c.acquire(nil, nil, raw.Addr(), 4096, nil)
	require.NoError(t, err)
	require.NoError(t, c.release(e4))
	require.Len(t, c.idle, 1, "raw addresses are not kept")
	require.Equal(t, 1, verbs.LiveObjects()["mr"])
	require.NoError(t, c.close())
	require.Zero(t, verbs.LiveObjects()["mr"])
}

func TestReachFromProbe(t *testing.T) {
	tc, err := transport{}.Open(driver.Config{Device: verbs.SoftDeviceName})
	require.NoError(t, err)
	defer func() { require.NoError(t, tc.Close()) }()
	got := tc.Reach()
	require.True(t, got.NICReaches(mem.Host))
	require.True(t, got.NICReaches(mem.CUDAManaged), "soft0 is the CPU: it reaches managed memory")
	require.False(t, got.NICReaches(mem.Sim))
	require.False(t, got.NICReaches(mem.CUDA))
	pool := tc.(*context).pool
	require.Equal(t, pool.Kind() == dm.KindDM, got.NICReaches(mem.DM), "DM is reached exactly when the context's pool is device memory (pool %s)", pool.Kind())
	require.False(t, got.CPUReaches(mem.DM), "the CPU never addresses DM")
}
