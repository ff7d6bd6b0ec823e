package dm_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestLargestBlock checks that a pool takes the largest block the device
// gives, up to the capacity asked for.
func TestLargestBlock(t *testing.T) {
	const ki = 1 << 10
	for _, tc := range []struct {
		name   string
		devCap int // soft0's capacity
		taken  int // held by someone else before NewPool
		cfg    dm.Config
		want   int
	}{
		{name: "default", devCap: 256 * ki, want: 256 * ki},
		{name: "device smaller", devCap: 100 * ki, cfg: dm.Config{Capacity: 256 * ki}, want: 100 * ki},
		{name: "device smaller odd", devCap: 100*ki + 100, cfg: dm.Config{Capacity: 256 * ki}, want: 100*ki + 64},
		{name: "capacity smaller", devCap: 256 * ki, cfg: dm.Config{Capacity: 8 * ki}, want: 8 * ki},
		{name: "capacity rounded to align", devCap: 256 * ki, cfg: dm.Config{Capacity: 1000, Align: 256}, want: 768},
		// Partly taken: the device's limit says 256 KiB, so the size is
		// found by probing.
		{name: "descent", devCap: 256 * ki, taken: 156 * ki, want: 100 * ki},
		{name: "descent odd", devCap: 256 * ki, taken: 156*ki - 1000, want: 100 * ki},
		{name: "descent large align", devCap: 256 * ki, taken: 100 * ki, cfg: dm.Config{Align: 32 * ki}, want: 128 * ki},
		{name: "descent small", devCap: 256 * ki, taken: 250 * ki, want: 4 * ki},
		{name: "descent capacity", devCap: 1024 * ki, taken: 1024*ki - 300*ki, cfg: dm.Config{Capacity: 1024 * ki}, want: 300 * ki},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withSoftDMCapacity(t, tc.devCap)
			ctx, pd := openPD(t, verbs.SoftDeviceName)
			if tc.taken > 0 {
				other, err := ctx.AllocDM(tc.taken)
				require.NoError(t, err)
				closeLater(t, other)
			}
			p := newPool(t, ctx, pd, tc.cfg)
			require.Equal(t, dm.KindDM, p.Kind())
			require.Equal(t, tc.want, p.Capacity())
			require.Equal(t, tc.want, p.MR().Len())
			alloc(t, p, p.Capacity())
		})
	}
}

// TestNoBlockFree: a device whose memory is all taken answers ENOMEM,
// which is not a reason to fall back to host memory.
func TestNoBlockFree(t *testing.T) {
	ctx, pd := openPD(t, verbs.SoftDeviceName)
	other, err := ctx.AllocDM(verbs.DefaultSoftDMCapacity - 1024)
	require.NoError(t, err)
	closeLater(t, other)
	p, err := dm.NewPool(ctx, pd, dm.Config{})
	require.ErrorIs(t, err, unix.ENOMEM)
	require.Nil(t, p)
	require.Equal(t, 1, verbs.LiveObjects()["dm"])
	require.Zero(t, verbs.LiveObjects()["mr"])

	// HostWhenFull: the same answer gives a host pool, usable through the same API.
	p = newPool(t, ctx, pd, dm.Config{Capacity: 8192, HostWhenFull: true})
	require.Equal(t, dm.KindHost, p.Kind())
	// No larger than the device's memory, as a pool of device memory would be
	// (it was the whole of Config.Capacity: a second context asking for a
	// gigabyte mapped a gigabyte).
	big := newPool(t, ctx, pd, dm.Config{Capacity: dm.MaxCapacity, HostWhenFull: true})
	require.Equal(t, dm.KindHost, big.Kind())
	require.Equal(t, verbs.DefaultSoftDMCapacity, big.Capacity())
	c := alloc(t, p, 100)
	in := []byte("device memory is all taken: the pool is host memory")
	require.NoError(t, c.CopyTo(3, in))
	out := make([]byte, len(in))
	require.NoError(t, c.CopyFrom(out, 3))
	require.Equal(t, in, out)
	require.Equal(t, 1, verbs.LiveObjects()["dm"], "the host pool holds no device memory")
}

func TestConfigErrors(t *testing.T) {
	ctx, pd := openPD(t, verbs.SoftDeviceName)
	ctx2, pd2 := openPD(t, verbs.SoftDeviceName)
	_ = ctx2
	for _, tc := range []struct {
		name string
		ctx  *verbs.Context
		pd   *verbs.PD
		cfg  dm.Config
		word string
	}{
		{"nil ctx", nil, pd, dm.Config{}, "ctx"},
		{"nil pd", ctx, nil, dm.Config{}, "pd"},
		{"pd of another context", ctx, pd2, dm.Config{}, "pd"},
		{"negative capacity", ctx, pd, dm.Config{Capacity: -1}, "Capacity"},
		// A wild capacity was mapped as host memory where the device's was taken
		// (and math.MaxInt overflowed the mapping's size).
		{"capacity past MaxCapacity", ctx, pd, dm.Config{Capacity: dm.MaxCapacity + 1, HostWhenFull: true}, "Capacity"},
		{"capacity MaxInt", ctx, pd, dm.Config{Capacity: math.MaxInt, HostOnly: true}, "Capacity"},
		{"align 2", ctx, pd, dm.Config{Align: 2}, "Align"},
		{"align 6", ctx, pd, dm.Config{Align: 6}, "Align"},
		{"align negative", ctx, pd, dm.Config{Align: -64}, "Align"},
		{"capacity below align", ctx, pd, dm.Config{Capacity: 32, Align: 64}, "Capacity"},
		{"bad access", ctx, pd, dm.Config{Access: verbs.AccessRemoteWrite}, "access"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := dm.NewPool(tc.ctx, tc.pd, tc.cfg)
			require.ErrorIs(t, err, verbs.ErrInvalid)
			require.ErrorContains(t, err, tc.word)
			require.Nil(t, p)
			requireNoDM(t)
		})
	}
}

func TestCloseOrder(t *testing.T) {
	forEachKind(t, func(t *testing.T, ctx *verbs.Context, pd *verbs.PD, k poolKind) {
		p, err := dm.NewPool(ctx, pd, dm.Config{})
		require.NoError(t, err)
		c, err := p.AllocChunk(100)
		require.NoError(t, err)

		require.ErrorIs(t, p.Close(), verbs.ErrBusy)
		require.ErrorIs(t, pd.Close(), verbs.ErrBusy, "the pool's MR keeps the PD")
		// A refused Close leaves the pool working.
		c2, err := p.AllocChunk(100)
		require.NoError(t, err)
		require.NoError(t, c2.CopyTo(1, []byte{1, 2, 3}))
		require.NoError(t, c2.Close())
		require.ErrorIs(t, p.Close(), verbs.ErrBusy)

		require.NoError(t, c.Close())
		require.NoError(t, p.Close())
		requireNoDM(t)
		require.NoError(t, p.Close(), "Close is idempotent")
		require.NoError(t, c.Close())
		_, err = p.AllocChunk(1)
		require.ErrorIs(t, err, verbs.ErrClosed)
	})
	require.NoError(t, (*dm.Pool)(nil).Close())
	_, err := (*dm.Pool)(nil).AllocChunk(1)
	require.ErrorIs(t, err, verbs.ErrInvalid)
}

func TestHostFallback(t *testing.T) {
	withSoftDMCapacity(t, 0)
	ctx, pd := openPD(t, verbs.SoftDeviceName)
	p := newPool(t, ctx, pd, dm.Config{Capacity: 12345, Align: 16})
	require.Equal(t, dm.KindHost, p.Kind())
	require.Equal(t, 12336, p.Capacity())
	require.NotZero(t, p.MR().Addr(), "a host MR has a virtual address")

	p2, err := dm.NewPool(ctx, pd, dm.Config{NoHostFallback: true})
	require.ErrorIs(t, err, verbs.ErrNotSupported)
	require.Nil(t, p2)
}

// TestFaults: a failure other than "no device memory" fails NewPool and
// leaves nothing behind, the DM it had included.
func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dmCap int
		fault verbs.FaultKind
	}{
		{"RegDMMR", verbs.DefaultSoftDMCapacity, verbs.FaultRegMR},
		{"AllocDM", verbs.DefaultSoftDMCapacity, verbs.FaultAllocDM},
		{"host RegMR", 0, verbs.FaultRegMR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withSoftDMCapacity(t, tc.dmCap)
			ctx, pd := openPD(t, verbs.SoftDeviceName)
			require.NoError(t, softControl(t, ctx).FailNth(tc.fault, 1))
			p, err := dm.NewPool(ctx, pd, dm.Config{})
			require.ErrorIs(t, err, verbs.ErrInjected)
			require.Nil(t, p)
			requireNoDM(t)
			// The device is whole again: a pool now gets all of it.
			p = newPool(t, ctx, pd, dm.Config{})
			require.Equal(t, dm.DefaultCapacity, p.Capacity())
		})
	}
	// A fault during the descent ends it too.
	t.Run("descent", func(t *testing.T) {
		ctx, pd := openPD(t, verbs.SoftDeviceName)
		other, err := ctx.AllocDM(156 << 10)
		require.NoError(t, err)
		closeLater(t, other)
		for nth := 2; nth <= 9; nth++ { // the 9 AllocDM calls that find 100 KiB
			require.NoError(t, softControl(t, ctx).FailNth(verbs.FaultAllocDM, nth))
			p, err := dm.NewPool(ctx, pd, dm.Config{})
			require.ErrorIs(t, err, verbs.ErrInjected, "fault at AllocDM #%d", nth)
			require.Nil(t, p)
			require.Equal(t, 1, verbs.LiveObjects()["dm"])
			require.Zero(t, verbs.LiveObjects()["mr"])
		}
	})
}
