package mem_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// TestGPUDirectWriteOrdering reads the device's GPUDirect write ordering and checks
// the flush against it: FlushGPUDirectWrites flushes exactly where the device needs a
// flush and the host can make one, and a flush made regardless works wherever the
// host can make one.
func TestGPUDirectWriteOrdering(t *testing.T) {
	requireCUDA(t)
	o, err := mem.GPUDirectWriteOrdering()
	require.NoError(t, err)
	t.Logf("GPUDirect RDMA writes ordering %d (0 none, 100 owner, 200 all devices, -1 unknown), host flush %v, needs a flush %v",
		o.Ordering, o.CanFlush, o.NeedsFlush())
	require.Contains(t, []int{-1, 0, 100, 200}, o.Ordering)
	before := mem.GPUDirectFlushes()
	require.NoError(t, mem.FlushGPUDirectWrites())
	want := uint64(0)
	if o.NeedsFlush() && o.CanFlush {
		want = 1
	}
	require.Equal(t, want, mem.GPUDirectFlushes()-before, "flushed exactly where needed and possible")
	if !o.CanFlush {
		t.Logf("the host cannot flush on this device: the forced flush is not tried")
		return
	}
	require.NoError(t, mem.ForceGPUDirectFlush())
	require.Equal(t, want+1, mem.GPUDirectFlushes()-before)
}
