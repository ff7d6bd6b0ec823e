package tlmlx5

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

func TestProbeReach(t *testing.T) {
	_, _, err := probeReach(nil)
	require.ErrorIs(t, err, mem.ErrInvalid)

	ctx, err := verbs.Open("")
	require.NoError(t, err)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	r, left, err := probeReach(pd)
	require.NoError(t, err)
	require.Empty(t, left, "the probes released everything")
	require.NoError(t, pd.Close())
	require.NoError(t, ctx.Close())
	t.Logf("device %s: %v; %v", ctx.Name(), r, r.Notes)
	require.True(t, r.NICReaches(mem.Host))
	require.False(t, r.NICReaches(mem.DM), "probeReach leaves DM to Open, which lists it when the context's pool is device memory")
	require.False(t, r.NICReaches(mem.Sim), "sim is never registrable")
	require.True(t, r.CPUReaches(mem.Host))
	require.False(t, r.CPUReaches(mem.Sim))
	require.False(t, r.CPUReaches(mem.CUDA))
	if !mem.CUDAAvailable() {
		require.False(t, r.NICReaches(mem.CUDA))
	}
	require.NoError(t, verbs.CheckLeaks())
	require.Zero(t, mem.Live())
}
