package asym

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
)

// planBytes is what one post must copy: every span of every side that copies, once.
func planBytes(p Staging) int64 {
	var n int64
	for _, sc := range []Scratch{p.Src, p.Dst} {
		if !sc.Needed {
			continue
		}
		for _, sp := range sc.Spans {
			if sc.CopyIn {
				n += int64(sp.Len)
			}
			if sc.CopyOut {
				n += int64(sp.Len)
			}
		}
	}
	return n
}

// TestStageLanded: blocks reported landed are copied out early, and Complete copies
// only the rest: after every post the user's buffer is right (gaps untouched) and the
// stage copied each planned byte once, and again for each time it was reported again.
//
// Landed ranges are queued in batches of batchMin bytes: every range at once (0), a few
// ranges per batch, or all of them at Complete (a batch larger than the buffer).
func TestStageLanded(t *testing.T) {
	for _, c := range []collective.Type{collective.Gather, collective.Gatherv} {
		for _, byAddr := range []bool{false, true} {
			for _, batch := range []int{0, 1 << 10, 1 << 30} {
				t.Run(fmt.Sprintf("%v/batch=%d", c, batch), func(t *testing.T) {
					rng := newRand(t)
					r := newRig(t, c, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach(), byAddr: byAddr})
					r.landed = true
					r.stage.earlyMin, r.stage.batchMin = 0, batch // the test's buffers are small
					plan, err := Plan(persistArgs(c, mem.Host, mem.Sim), mem.DefaultReach())
					require.NoError(t, err)
					require.True(t, plan.Dst.CopyOut, "%v", plan)
					per := planBytes(plan)
					want := make([]byte, r.big)
					fill(rng, want)
					r.write(r.dst, 0, want)
					r.stage.Landed(0, r.big) // outside a post: ignored
					for i := range 100 {
						r.postGather(rng, want)
						rep := r.stage.Report()
						require.Equal(t, int64(i+1)*per+r.again, rep.Copied, "post %d", i+1)
						require.Equal(t, i+1, rep.Posts)
					}
					rep := r.stage.Report()
					require.True(t, rep.Dst.Staged && rep.Dst.CopyOut)
					require.Contains(t, rep.Dst.String(), "sim via host scratch")
				})
			}
		}
	}
}

// TestStageLandedFault: a copy-out fault fails the post even when every block landed
// early, and the next post works.
func TestStageLandedFault(t *testing.T) {
	f := fault.NewSet([]fault.Fault{{Kind: fault.CopyOut, N: 1}}, 0)
	r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach(), opts: []Option{WithFaults(f)}})
	r.stage.earlyMin, r.stage.batchMin = 0, 0
	require.NoError(t, r.stage.CopyIn())
	r.stage.Landed(0, r.big)
	err := r.stage.Complete(nil)
	require.ErrorIs(t, err, ErrInjected)
	require.Contains(t, err.Error(), "copy-out of dst")
	require.False(t, r.stage.InFlight())
	require.Equal(t, int64(1), f.Seen(fault.CopyOut), "the fault fired")
	r.landed = true
	r.stage.earlyMin, r.stage.batchMin = 0, 0
	r.postGather(newRand(t), make([]byte, r.big))
}

func TestSpanArithmetic(t *testing.T) {
	spans := []Span{{0, 10}, {20, 10}, {40, 5}}
	require.Equal(t, []Span{{5, 5}, {20, 3}}, intersect(spans, Span{5, 18}))
	require.Equal(t, spans, minus(spans, nil))
	require.Equal(t, []Span{{0, 2}, {8, 2}, {20, 10}, {40, 3}}, minus(spans, []Span{{2, 6}, {43, 3}}))
	require.Empty(t, minus(spans, []Span{{0, 100}}))
	require.Equal(t, []Span{{25, 5}, {40, 5}}, minus(spans, []Span{{0, 12}, {18, 7}}))
}
