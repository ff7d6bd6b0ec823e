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
	e1, err := c.acquire(s, nil, 0, 0, receiveAccess, nil)
	require.NoError(t, err)
	e2, err := c.acquire(s, nil, 0, 0, receiveAccess, func() error { t.Fatal("a hit must not register"); return nil })
	require.NoError(t, err)
	require.Same(t, e1, e2)
	require.NoError(t, c.release(e1))
	require.NoError(t, c.release(e2))
	require.Len(t, c.idle, 1, "a slice stays registered")

	b, err := mem.Alloc(mem.Host, 8192)
	require.NoError(t, err)
	e3, err := c.acquire(nil, b, 0, 0, receiveAccess, nil)
	require.NoError(t, err)
	require.NoError(t, c.release(e3))
	require.Len(t, c.idle, 2)
	require.NoError(t, b.Close())
	c.sweep()
	require.Len(t, c.idle, 1, "a freed Buffer's registration is dropped")

	raw, err := mem.Alloc(mem.Host, 4096)
	require.NoError(t, err)
	defer raw.Close()
	e4, err := c.acquire(nil, nil, raw.Addr(), 4096, receiveAccess, nil)
	require.NoError(t, err)
	require.NoError(t, c.release(e4))
	require.Len(t, c.idle, 1, "raw addresses are not kept")
	require.Equal(t, 1, verbs.LiveObjects()["mr"])
	require.NoError(t, c.close())
	require.Zero(t, verbs.LiveObjects()["mr"])
}

// TestReachFromProbe: what the transport reports reaching is what registration really
// does on the device, with soft0's GPUDirect stand-in off and on.
func TestReachFromProbe(t *testing.T) {
	for _, gd := range []bool{false, true} {
		tc, err := transport{}.Open(driver.Config{Device: verbs.SoftDeviceName, SoftGPUDirect: gd})
		require.NoError(t, err)
		got := tc.Reach()
		pool := tc.(*context).pool
		require.Equal(t, pool.Kind() == dm.KindDM, got.NICReaches(mem.DM), "DM is reached exactly when the context's pool is device memory (pool %s)", pool.Kind())
		require.False(t, got.CPUReaches(mem.DM), "the CPU never addresses DM")
		require.NoError(t, tc.Close())
		require.True(t, got.NICReaches(mem.Host))
		require.False(t, got.NICReaches(mem.Sim))
		dev, err := verbs.OpenWith(verbs.SoftDeviceName, verbs.Options{SoftGPUDirect: gd})
		require.NoError(t, err)
		pd, err := dev.AllocPD()
		require.NoError(t, err)
		for _, mt := range []mem.Type{mem.CUDAManaged, mem.CUDA} {
			b, err := mem.Alloc(mt, 1<<16)
			if err != nil {
				require.False(t, got.NICReaches(mt), "%v cannot be allocated here", mt)
				if testutil.Required("cuda") {
					t.Fatalf("cuda required (IBCOLL_REQUIRE) but allocating %v failed: %v", mt, err)
				}
				continue
			}
			mr, rerr := pd.RegMRAddr(b.Addr(), b.Len(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			require.Equal(t, rerr == nil, got.NICReaches(mt), "stand-in %v, %v: registration says %v, reach says %v", gd, mt, rerr, got)
			if mt == mem.CUDA {
				require.Equal(t, gd, rerr == nil, "soft0 takes device memory exactly as the stand-in: %v", rerr)
			}
			if rerr == nil {
				require.NoError(t, mr.Close())
			} else {
				require.ErrorIs(t, rerr, verbs.ErrNotSupported)
			}
			require.NoError(t, b.Close())
		}
		require.NoError(t, pd.Close())
		require.NoError(t, dev.Close())
	}
}
