package mem_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// TestReach: host memory is reachable by the NIC and the CPU whether the lists name it
// or not (a transport that reports no list still sends host buffers directly); any
// other type only where its list names it.
func TestReach(t *testing.T) {
	others := []mem.Type{mem.CUDA, mem.CUDAManaged, mem.DM, mem.Sim}
	for _, r := range []mem.Reach{{}, {NIC: []mem.Type{mem.DM}, CPU: []mem.Type{mem.CUDAManaged}}, mem.DefaultReach(), mem.AllReachable()} {
		require.True(t, r.NICReaches(mem.Host), "%v", r)
		require.True(t, r.CPUReaches(mem.Host), "%v", r)
		for _, typ := range others {
			require.Equal(t, slices.Contains(r.NIC, typ), r.NICReaches(typ), "%v: nic reaches %v", r, typ)
			require.Equal(t, slices.Contains(r.CPU, typ), r.CPUReaches(typ), "%v: cpu reaches %v", r, typ)
		}
	}
	d := mem.DefaultReach()
	require.True(t, d.NICReaches(mem.DM) && !d.CPUReaches(mem.DM), "the CPU reaches DM only by copies")
	require.True(t, d.CPUReaches(mem.CUDAManaged) && !d.NICReaches(mem.CUDAManaged))
	require.False(t, d.NICReaches(mem.CUDA) || d.CPUReaches(mem.CUDA) || d.NICReaches(mem.Sim))
}
