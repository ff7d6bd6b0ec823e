package verbs_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// softEnd is an end on soft0 opened with opts.
func softEnd(t *testing.T, opts verbs.Options) *end {
	t.Helper()
	ctx, err := verbs.OpenWith(verbs.SoftDeviceName, opts)
	require.NoError(t, err)
	closeLater(t, ctx)
	e := &end{ctx: ctx}
	e.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	closeLater(t, e.pd)
	e.cq, err = ctx.CreateCQ(64)
	require.NoError(t, err)
	closeLater(t, e.cq)
	e.qp, err = e.pd.CreateQP(verbs.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 16, MaxRecvWR: 16, MaxSGE: 2})
	require.NoError(t, err)
	closeLater(t, e.qp)
	return e
}

// TestSoftGPUDirect: soft0 refuses CUDA device memory unless it is the GPUDirect
// stand-in, and as the stand-in it moves device memory both ways, by RDMA write,
// read and send, with random data checked through host copies.
func TestSoftGPUDirect(t *testing.T) {
	d, err := mem.Alloc(mem.CUDA, 1<<20)
	if err != nil {
		if testutil.Required("cuda") {
			t.Fatalf("cuda required (IBCOLL_REQUIRE) but allocating device memory failed: %v", err)
		}
		t.Skipf("no CUDA device memory here: %v", err)
	}
	defer d.Close()
	plain := softEnd(t, verbs.Options{})
	_, err = plain.pd.RegMRAddr(d.Addr(), d.Len(), rw)
	require.ErrorIs(t, err, verbs.ErrNotSupported, "soft0 without the stand-in must refuse device memory")

	a, b := softEnd(t, verbs.Options{SoftGPUDirect: true}), softEnd(t, verbs.Options{SoftGPUDirect: true})
	require.NoError(t, a.qp.Connect(roundTrip(t, b.qp.Info())))
	require.NoError(t, b.qp.Connect(roundTrip(t, a.qp.Info())))
	d2, err := mem.Alloc(mem.CUDA, 1<<20)
	require.NoError(t, err)
	defer d2.Close()
	host, err := mem.Alloc(mem.Host, 1<<20)
	require.NoError(t, err)
	defer host.Close()
	dmr, err := a.pd.RegMRAddr(d.Addr(), d.Len(), rw)
	require.NoError(t, err)
	closeLater(t, dmr)
	require.Equal(t, "soft0 GPUDirect stand-in", dmr.Via())
	d2mr, err := b.pd.RegMRAddr(d2.Addr(), d2.Len(), rw)
	require.NoError(t, err)
	closeLater(t, d2mr)
	hmr, err := b.pd.RegMRAddr(host.Addr(), host.Len(), rw)
	require.NoError(t, err)
	closeLater(t, hmr)

	r := testutil.Rand(t)
	const n = 300007
	want := make([]byte, n)
	testutil.Fill(r, want)
	copy(host.Bytes(), want)
	// host (b) → device (a) by RDMA read from a.
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMARead, Signaled: true,
		SGE: []verbs.SGE{{Addr: uint64(d.Addr()) + 9, Length: n, LKey: dmr.LKey()}}, RemoteAddr: uint64(host.Addr()), RKey: hmr.RKey()}))
	waitOK(t, a.cq, 1)
	// device (a) → device (b) by RDMA write.
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 2, Op: verbs.OpRDMAWrite, Signaled: true,
		SGE: []verbs.SGE{{Addr: uint64(d.Addr()) + 9, Length: n, LKey: dmr.LKey()}}, RemoteAddr: uint64(d2.Addr()) + 100, RKey: d2mr.RKey()}))
	waitOK(t, a.cq, 1)
	got, err := mem.Alloc(mem.Host, n)
	require.NoError(t, err)
	defer got.Close()
	require.NoError(t, mem.Copy(got, 0, d2, 100, n))
	testutil.Equal(t, want, got.Bytes(), "host → device → device")
	// A send from device memory into a host receive.
	clear(host.Bytes())
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 3, SGE: []verbs.SGE{{Addr: uint64(host.Addr()), Length: n, LKey: hmr.LKey()}}}))
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 4, Op: verbs.OpSend, Signaled: true,
		SGE: []verbs.SGE{{Addr: uint64(d.Addr()) + 9, Length: n, LKey: dmr.LKey()}}}))
	waitOK(t, a.cq, 1)
	waitOK(t, b.cq, 1)
	testutil.Equal(t, want, host.Bytes()[:n], "device → host by send")
}

// TestSoftPinnedStream: soft0 writes host memory pinned for CUDA with non-temporal
// stores (it says so in Via), and other host memory as before; RDMA writes into both,
// at offsets that cut cache lines, land exactly. It needs CUDA to pin.
func TestSoftPinnedStream(t *testing.T) {
	pinned, err := mem.Alloc(mem.Host, 1<<20)
	require.NoError(t, err)
	defer pinned.Close()
	err = pinned.Pin()
	testutil.RequireCUDA(t, err == nil, fmt.Sprintf("pinning host memory: %v", err))
	plain, err := mem.Alloc(mem.Host, 1<<20)
	require.NoError(t, err)
	defer plain.Close()
	a, b := softEnd(t, verbs.Options{}), softEnd(t, verbs.Options{})
	require.NoError(t, a.qp.Connect(roundTrip(t, b.qp.Info())))
	require.NoError(t, b.qp.Connect(roundTrip(t, a.qp.Info())))
	src, err := mem.Alloc(mem.Host, 1<<20)
	require.NoError(t, err)
	defer src.Close()
	smr, err := a.pd.RegMRAddr(src.Addr(), src.Len(), rw)
	require.NoError(t, err)
	closeLater(t, smr)
	pmr, err := b.pd.RegMRAddr(pinned.Addr(), pinned.Len(), rw)
	require.NoError(t, err)
	closeLater(t, pmr)
	hmr, err := b.pd.RegMRAddr(plain.Addr(), plain.Len(), rw)
	require.NoError(t, err)
	closeLater(t, hmr)
	require.Equal(t, "soft0, non-temporal writes (host memory pinned for CUDA)", pmr.Via())
	require.Equal(t, "soft0", hmr.Via())
	ctl, err := verbs.SoftControl(b.ctx)
	require.NoError(t, err)

	r := testutil.Rand(t)
	for i, c := range []struct {
		dst        *mem.Buffer
		mr         *verbs.MR
		off, n, at int
	}{{pinned, pmr, 3, 300007, 5}, {pinned, pmr, 64, 4096, 0}, {pinned, pmr, 0, 70, 1}, {plain, hmr, 3, 300007, 5}} {
		testutil.Fill(r, src.Bytes())
		testutil.Fill(r, c.dst.Bytes())
		want := bytes.Clone(c.dst.Bytes())
		copy(want[c.off:c.off+c.n], src.Bytes()[c.at:c.at+c.n])
		before, err := ctl.Streamed(c.mr)
		require.NoError(t, err)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRDMAWrite, Signaled: true,
			SGE: []verbs.SGE{{Addr: uint64(src.Addr()) + uint64(c.at), Length: uint32(c.n), LKey: smr.LKey()}}, RemoteAddr: uint64(c.dst.Addr()) + uint64(c.off), RKey: c.mr.RKey()}))
		waitOK(t, a.cq, 1)
		testutil.Equal(t, want, c.dst.Bytes(), fmt.Sprintf("write %d", i))
		after, err := ctl.Streamed(c.mr)
		require.NoError(t, err)
		streamed := int64(0)
		if c.mr == pmr {
			streamed = int64(c.n) // pinned memory: every write, whatever its size
		}
		require.Equal(t, streamed, after-before, "write %d: bytes through the non-temporal copy", i)
	}
}

// TestSoftGPUDirectAtomicResultInDeviceMemory: an atomic whose local (result) SGE is
// device memory registered through the GPUDirect stand-in gets the fetched value
// there, by the copy engine, and the target's word is updated. soft0 wrote the
// result with a CPU store to the device address, which faults (found by a review, by
// reading).
func TestSoftGPUDirectAtomicResultInDeviceMemory(t *testing.T) {
	d, err := mem.Alloc(mem.CUDA, 1<<16)
	if err != nil {
		if testutil.Required("cuda") {
			t.Fatalf("cuda required (IBCOLL_REQUIRE) but allocating device memory failed: %v", err)
		}
		t.Skipf("no CUDA device memory here: %v", err)
	}
	defer d.Close()
	a, b := softEnd(t, verbs.Options{SoftGPUDirect: true}), softEnd(t, verbs.Options{SoftGPUDirect: true})
	require.NoError(t, a.qp.Connect(roundTrip(t, b.qp.Info())))
	require.NoError(t, b.qp.Connect(roundTrip(t, a.qp.Info())))
	dmr, err := a.pd.RegMRAddr(d.Addr(), d.Len(), rw)
	require.NoError(t, err)
	closeLater(t, dmr)
	host, err := mem.Alloc(mem.Host, 4096)
	require.NoError(t, err)
	defer host.Close()
	binary.LittleEndian.PutUint64(host.Bytes(), 41)
	hmr, err := b.pd.RegMRAddr(host.Addr(), host.Len(), rw)
	require.NoError(t, err)
	closeLater(t, hmr)
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpAtomicFetchAdd, Signaled: true, CompareAdd: 1,
		SGE: []verbs.SGE{{Addr: uint64(d.Addr()), Length: 8, LKey: dmr.LKey()}}, RemoteAddr: uint64(host.Addr()), RKey: hmr.RKey()}))
	wc := waitWCs(t, a.cq, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status, "%v", wc)
	got := make([]byte, 8)
	require.NoError(t, mem.CopyPtr(uintptr(unsafe.Pointer(&got[0])), mem.Host, d.Addr(), mem.CUDA, 8))
	require.EqualValues(t, 41, binary.LittleEndian.Uint64(got), "the fetched value, in device memory")
	require.EqualValues(t, 42, binary.LittleEndian.Uint64(host.Bytes()), "the target's word")
}
