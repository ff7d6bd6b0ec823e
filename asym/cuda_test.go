package asym

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestStageCUDA stages real CUDA and managed buffers (on the GPU machine,
// with IBCOLL_REQUIRE=cuda): weak asymmetry on a root with a GPU dst
// (gather: host scratch, copy-out to the GPU) and a GPU src (scatter:
// copy-in from the GPU), under the default reach, where the NIC cannot
// register CUDA memory, and with everything reachable, where the baseline
// table decides. Every post has fresh data, checked through the GPU.
func TestStageCUDA(t *testing.T) {
	testutil.RequireCUDA(t, mem.CUDAAvailable(), "no CUDA device (libcuda.so.1 absent or no GPU)")
	reaches := map[string]mem.Reach{"all": mem.AllReachable(), "default": mem.DefaultReach()}
	var cases []persistCase
	for _, c := range []collective.Type{collective.Scatter, collective.Scatterv, collective.Gather, collective.Gatherv} {
		for _, tp := range [][2]mem.Type{{mem.Host, mem.CUDA}, {mem.CUDA, mem.Host}, {mem.CUDA, mem.CUDA},
			{mem.Host, mem.CUDAManaged}, {mem.CUDAManaged, mem.CUDA}, {mem.Sim, mem.CUDA}} {
			for _, reach := range []string{"all", "default"} {
				cases = append(cases, persistCase{c, tp[0], tp[1], reach, false}, persistCase{c, tp[0], tp[1], reach, true})
			}
		}
	}
	for _, pc := range cases {
		t.Run(pc.String(), func(t *testing.T) {
			rng := newRand(t)
			r := newRig(t, pc.coll, pc.st, pc.dt, rigOpts{reach: reaches[pc.reach], byAddr: pc.byAddr})
			require.Equal(t, pc.dt, mem.TypeOf(r.dst.Addr()), "dst type detected")
			require.Equal(t, pc.st, mem.TypeOf(r.src.Addr()), "src type detected")
			scatter := pc.coll == collective.Scatter || pc.coll == collective.Scatterv
			want := make([]byte, r.big)
			if !scatter {
				fill(rng, want)
				r.write(r.dst, 0, want)
			}
			for range 50 {
				if scatter {
					r.postScatter(rng)
				} else {
					r.postGather(rng, want)
				}
			}
		})
	}
}
