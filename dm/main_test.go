package dm_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

func TestMain(m *testing.M) { testutil.LeakCheck(m, verbs.CheckLeaks) }

// Tests here share soft0's device memory, which is process-wide, so none
// of them runs in parallel.

func closeLater(t testing.TB, c interface{ Close() error }) {
	t.Helper()
	t.Cleanup(func() { require.NoError(t, c.Close()) })
}

// softControl returns ctx's soft0 control surface, or fails t.
func softControl(t testing.TB, ctx *verbs.Context) *verbs.Soft {
	t.Helper()
	s, err := verbs.SoftControl(ctx)
	require.NoError(t, err)
	return s
}

// withSoftDMCapacity sets soft0's DM capacity for the rest of the test.
// The capacity is the device's; the context only reaches it, and stays
// open until the capacity is restored.
func withSoftDMCapacity(t testing.TB, n int) {
	t.Helper()
	ctx, err := verbs.Open(verbs.SoftDeviceName)
	require.NoError(t, err)
	closeLater(t, ctx)
	soft := softControl(t, ctx)
	prev, err := soft.SetDMCapacity(n)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := soft.SetDMCapacity(prev)
		require.NoError(t, err)
	})
}

func openPD(t testing.TB, dev string) (*verbs.Context, *verbs.PD) {
	t.Helper()
	ctx, err := verbs.Open(dev)
	require.NoError(t, err)
	closeLater(t, ctx)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	closeLater(t, pd)
	return ctx, pd
}

func newPool(t testing.TB, ctx *verbs.Context, pd *verbs.PD, cfg dm.Config) *dm.Pool {
	t.Helper()
	p, err := dm.NewPool(ctx, pd, cfg)
	require.NoError(t, err)
	closeLater(t, p)
	return p
}

func alloc(t testing.TB, p *dm.Pool, n int) *dm.Chunk {
	t.Helper()
	c, err := p.AllocChunk(n)
	require.NoError(t, err)
	closeLater(t, c)
	return c
}

// requireNoDM fails unless no DM or MR is open: the fixtures of these
// tests hold only contexts and PDs.
func requireNoDM(t testing.TB) {
	t.Helper()
	live := verbs.LiveObjects()
	require.Zero(t, live["dm"], "live DMs: %v", live)
	require.Zero(t, live["mr"], "live MRs: %v", live)
}

// poolKind is one way of backing a pool on soft0.
type poolKind struct {
	name  string
	dmCap int // soft0's DM capacity; 0 forces the host fallback
}

var softKinds = []poolKind{{dm.KindDM, verbs.DefaultSoftDMCapacity}, {dm.KindHost, 0}}

func forEachKind(t *testing.T, fn func(t *testing.T, ctx *verbs.Context, pd *verbs.PD, k poolKind)) {
	for _, k := range softKinds {
		t.Run(k.name, func(t *testing.T) {
			withSoftDMCapacity(t, k.dmCap)
			ctx, pd := openPD(t, verbs.SoftDeviceName)
			fn(t, ctx, pd, k)
		})
	}
}

// realDevices returns the active libibverbs devices: rxe0 and rxe1 in the
// rxe VM, none on machines without RDMA.
func realDevices(t testing.TB) []string {
	t.Helper()
	devs, err := verbs.Devices()
	require.NoError(t, err)
	var out []string
	for _, d := range devs {
		if d.Provider == "ibv" && d.Active() {
			out = append(out, d.Name)
		}
	}
	return out
}

// hostBuffer is registered mmap'd memory, as long-lived buffers are.
type hostBuffer struct {
	b  []byte
	mr *verbs.MR
}

func newHostBuffer(t testing.TB, pd *verbs.PD, n int) *hostBuffer {
	t.Helper()
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, unix.Munmap(m)) })
	mr, err := pd.RegMRAddr(uintptr(unsafe.Pointer(&m[0])), n, dm.DefaultAccess)
	require.NoError(t, err)
	closeLater(t, mr)
	return &hostBuffer{b: m, mr: mr}
}
