package mem_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestExportDMABufRefusesOtherMemory: only CUDA device memory is exported;
// anything else, and bad arguments, fail with ErrInvalid naming the cause.
func TestExportDMABufRefusesOtherMemory(t *testing.T) {
	h, err := mem.Alloc(mem.Host, 4096)
	require.NoError(t, err)
	defer h.Close()
	_, err = mem.ExportDMABuf(h.Addr(), h.Len())
	require.ErrorIs(t, err, mem.ErrInvalid)
	require.Contains(t, err.Error(), "host")
	_, err = mem.ExportDMABuf(0, 8)
	require.ErrorIs(t, err, mem.ErrInvalid)
	require.Contains(t, err.Error(), "addr")
	_, err = mem.ExportDMABuf(h.Addr(), 0)
	require.ErrorIs(t, err, mem.ErrInvalid)
	require.Contains(t, err.Error(), "length")
}

// TestExportDMABufCUDA: where the driver exports dma-bufs, a device buffer
// (at its start and at an odd offset inside it) comes back as a descriptor
// that covers it; where it does not, the error says ErrNotSupported.
func TestExportDMABufCUDA(t *testing.T) {
	const n = 3<<20 + 5
	d, err := mem.Alloc(mem.CUDA, n)
	if err != nil {
		if testutil.Required("cuda") {
			t.Fatalf("cuda required (IBCOLL_REQUIRE) but allocating device memory failed: %v", err)
		}
		t.Skipf("no CUDA device memory here: %v", err)
	}
	defer d.Close()
	for _, off := range []int{0, 4097, n - 17} {
		length := n - off
		x, err := mem.ExportDMABuf(d.Addr()+uintptr(off), length)
		if err != nil {
			require.ErrorIs(t, err, mem.ErrNotSupported, "only a driver without dma-buf export may refuse")
			t.Logf("this driver exports no dma-buf: %v", err)
			return
		}
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(x.FD, &st), "the descriptor is open")
		require.LessOrEqual(t, x.Base, d.Addr()+uintptr(off))
		require.GreaterOrEqual(t, x.Size, x.Offset(d.Addr()+uintptr(off))+length)
		require.Zero(t, x.Size%unix.Getpagesize(), "whole pages")
		t.Logf("offset %d: fd %d base %#x size %d offset %d", off, x.FD, x.Base, x.Size, x.Offset(d.Addr()+uintptr(off)))
		require.NoError(t, unix.Close(x.FD))
	}
}
