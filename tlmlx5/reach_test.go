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

// A probe whose registration does not deregister keeps it and its buffer (memory is
// never freed under a registration) for the context's Close, which releases them
// before the PD. Host memory stands in for the CUDA types the probe registers.
func TestProbeLeftovers(t *testing.T) {
	ctx, err := verbs.Open(verbs.SoftDeviceName)
	require.NoError(t, err)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	soft, err := verbs.SoftControl(ctx)
	require.NoError(t, err)
	require.NoError(t, soft.FailNth(verbs.FaultDeregMR, 1))
	via, left, err := probeRegister(pd, mem.Host)
	require.NoError(t, err, "the registration itself worked")
	require.NotEmpty(t, via)
	require.NotNil(t, left, "the failed deregistration left the probe's MR")
	require.NotNil(t, left.mr)
	require.NotNil(t, left.b)
	require.NotZero(t, left.b.Addr(), "the buffer was freed under its registration")
	require.ErrorIs(t, pd.Close(), verbs.ErrBusy)
	require.NoError(t, left.Close())
	require.Nil(t, left.mr)
	require.Nil(t, left.b)
	require.NoError(t, pd.Close())
	require.NoError(t, ctx.Close())

	// Nothing left where everything releases.
	ctx, err = verbs.Open(verbs.SoftDeviceName)
	require.NoError(t, err)
	pd, err = ctx.AllocPD()
	require.NoError(t, err)
	_, left, err = probeRegister(pd, mem.Host)
	require.NoError(t, err)
	require.Nil(t, left)
	require.NoError(t, pd.Close())
	require.NoError(t, ctx.Close())
}
