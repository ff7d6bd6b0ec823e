package mem_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

func TestProbe(t *testing.T) {
	_, err := mem.Probe(nil)
	require.ErrorIs(t, err, mem.ErrInvalid)

	ctx, err := verbs.Open("")
	require.NoError(t, err)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	r, err := mem.Probe(pd)
	require.NoError(t, err)
	require.NoError(t, pd.Close())
	require.NoError(t, ctx.Close())
	t.Logf("device %s: %v; %v", ctx.Name(), r, r.Notes)
	require.True(t, r.NICReaches(mem.Host))
	require.True(t, r.NICReaches(mem.DM))
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
