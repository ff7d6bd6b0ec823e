package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestScenarioOutputAhead: persistent collectives whose output is staged on every rank
// (sim memory), at sizes that go by ready-to-receive (and, for a 2-rank gather, in
// landing pieces), posted 30 times with fresh data and checked every time. The transport holds such an output in
// two buffers of its own and sends its ready-to-receives a post ahead, so peers write
// a post while the last one is copied out; the stage copies out of the post's buffer.
// A gather root (which only receives into its output) must report that it did
// (StagingReport.Dst.Alternate), or the test tests nothing.
func TestScenarioOutputAhead(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, n := range []int{2, 5} {
		w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second})
		for _, typ := range []coll.CollType{coll.Gather, coll.Gatherv, coll.Scatter, coll.Scatterv, coll.Bcast,
			coll.Allgather, coll.Alltoall, coll.Alltoallv} {
			// Above the eager maximum (8 KiB); the race detector makes bytes slow.
			count := 9_000 + rnd.IntN(30_000)
			if n == 2 && typ == coll.Gather {
				count = 600_000 + rnd.IntN(100_000) // at least two 256 KiB landing pieces
			}
			s := randScenario(rnd, n, typ, "", count)
			s.dt, s.op, s.inPlace, s.reps = coll.Uint8, 0, false, 30
			for r := range n {
				s.dstType[r] = mem.Sim
				if typ == coll.Bcast {
					s.srcType[r] = mem.Sim // its output
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := s.run(ctx, w, rnd)
			cancel()
			require.NoError(t, err, "n=%d %v", n, typ)
			alternate := 0
			for _, rep := range s.staging {
				if rep.Dst.Alternate || rep.Src.Alternate {
					alternate++
				}
			}
			t.Logf("n=%d %v: %d of %d ranks held their output in the transport's two buffers", n, typ, alternate, n)
			if typ == coll.Gather {
				require.True(t, s.staging[s.root].Dst.Alternate, "n=%d: the gather root's staged output: %v", n, s.staging[s.root].Dst)
			}
		}
		w.close()
	}
}
