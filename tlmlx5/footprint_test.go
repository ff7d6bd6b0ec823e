package tlmlx5

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
)

// TestFootprint holds Footprint to the graphs the builder makes: for every algorithm
// (and the default choice) on teams of 1 to 256 ranks, every rank built, the mean of
// the ranks' distinct send and receive peers and of their operations is at most what
// Footprint says, and Footprint says at most twice that plus 4. ibcoll-perf refuses runs
// by it, so an estimate below the graphs would let a run exhaust memory, and one far
// above would refuse runs that fit.
func TestFootprint(t *testing.T) {
	ctx := openTagCtx(t)
	sizes := []int{1, 2, 3, 5, 8, 17, 64, 256}
	if testing.Short() {
		sizes = []int{1, 2, 5, 17, 64}
	}
	checked := 0
	for _, n := range sizes {
		eps := make([]driver.Endpoint, n)
		for r := range eps {
			eps[r] = tagEndpoint(t, ctx, n, r)
		}
		for _, c := range collective.Types() {
			for _, alg := range append([]string{""}, Algorithms(c)...) {
				if alg != "" && Fits(c, alg, n) != nil {
					continue
				}
				// The chain's chunks grow with the vector (1 MiB: 8 chunks). The large
				// vector runs on the small teams only: the transport keeps every
				// rank's registered buffers until its endpoint closes.
				for _, count := range []int{1, 1 << 18} {
					if count > 1 && (c != collective.Bcast || n > 17) {
						continue
					}
					a := uniformArgs(c, n, 0, 0, count)
					var links, ops int
					var got string
					for r := range n {
						k, err := buildTask(t, eps[r], c, alg, uniformArgs(c, n, r, 0, count))
						require.NoError(t, err)
						peers := map[int]bool{}
						for _, o := range k.ops {
							if o.kind == opSend || o.kind == opRecv {
								peers[o.peer] = true
							}
						}
						links += len(peers)
						ops += len(k.ops)
						got = k.alg
						require.NoError(t, k.Close())
					}
					bytes := max(a.Src.Count, a.Dst.Count) * collective.Int32.Size()
					if c == collective.Gather || c == collective.Scatter {
						bytes = count * collective.Int32.Size()
					}
					fl, fo, err := Footprint(c, alg, n, bytes)
					require.NoError(t, err)
					if alg == "" {
						require.Equal(t, choose(c, n, bytes).name, named(c, got).name, "%v n=%d bytes=%d: the default choice", c, n, bytes)
					}
					ml, mo := float64(links)/float64(n), float64(ops)/float64(n)
					what := []any{"%v %q (%s) n=%d bytes=%d: measured %.2f links and %.2f operations per rank, Footprint %.2f and %.2f", c, alg, got, n, bytes, ml, mo, fl, fo}
					require.GreaterOrEqual(t, fl, ml, what...)
					require.GreaterOrEqual(t, fo, mo, what...)
					require.LessOrEqual(t, fl, 2*ml+4, what...)
					require.LessOrEqual(t, fo, 2*mo+4, what...)
					checked++
				}
			}
		}
	}
	t.Logf("%d footprints checked", checked)

	for _, bad := range []struct {
		c        collective.Type
		alg      string
		n, bytes int
		want     error
	}{
		{collective.Gather, "", 0, 8, driver.ErrInvalid},
		{collective.Gather, "", 4, -1, driver.ErrInvalid},
		{collective.Gather, "ring", 4, 8, driver.ErrInvalid},
		{collective.Allgather, "rd", 6, 8, driver.ErrInvalid},
		{collective.Gather, "", 1 << 16, 8, driver.ErrNotSupported},
	} {
		_, _, err := Footprint(bad.c, bad.alg, bad.n, bad.bytes)
		require.ErrorIs(t, err, bad.want, "%+v", bad)
	}
}
