package asym

import (
	"errors"
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
// Landed ranges are queued once a run of adjacent ones reaches batchMin bytes: every
// range at once (0), some runs, or none (a batch larger than the buffer: Complete
// copies everything synchronously).
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
						base := int64(i+1) * per
						switch batch {
						case 0: // every report is queued at once, a repeated one again
							require.Equal(t, base+r.again, rep.Copied, "post %d", i+1)
						case 1 << 30: // nothing queued early: one copy at completion
							require.Equal(t, base, rep.Copied, "post %d", i+1)
						default: // a repeat is copied again only if its first report was queued
							require.GreaterOrEqual(t, rep.Copied, base, "post %d", i+1)
							require.LessOrEqual(t, rep.Copied, base+r.again, "post %d", i+1)
						}
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
	require.Equal(t, []Span{{5, 5}, {20, 3}}, intersect(nil, spans, Span{5, 18}))
	require.Equal(t, spans, minus(nil, spans, nil))
	require.Equal(t, []Span{{0, 2}, {8, 2}, {20, 10}, {40, 3}}, minus(nil, spans, []Span{{43, 3}, {2, 6}}))
	require.Empty(t, minus(nil, spans, []Span{{0, 100}}))
	require.Equal(t, []Span{{25, 5}, {40, 5}}, minus(nil, spans, []Span{{0, 12}, {18, 7}}))
}

// TestStageLandedRuns: a run of adjacent landed ranges is queued as one copy once it
// reaches batchMin, whatever landed elsewhere in between (a gather root's blocks land
// in pieces interleaved across senders); shorter runs wait for Complete.
func TestStageLandedRuns(t *testing.T) {
	r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach()})
	rng := newRand(t)
	a, b := r.blocks[0], r.blocks[3] // two blocks of peers, apart (pRoot is 2)
	require.Greater(t, a.n, 3)
	require.Greater(t, b.n, 3)
	r.stage.earlyMin, r.stage.batchMin = 0, a.n
	want := make([]byte, r.big)
	fill(rng, want)
	r.write(r.dst, 0, want)
	require.NoError(t, r.stage.CopyIn())
	dst := r.buf(r.stage.Dst())
	require.NotEqual(t, r.dst, dst, "the destination is staged")
	land := func(off, n int) {
		p := make([]byte, n)
		fill(rng, p)
		r.write(dst, off, p)
		copy(want[off:], p)
		r.stage.Landed(off, n)
	}
	early := func() []Span { return append([]Span(nil), r.stage.sides[1].early...) }
	h := a.n / 2
	land(a.off, h)
	land(b.off, 1)
	require.Empty(t, early(), "no run is long enough yet")
	land(b.off+1, 1)
	land(a.off+h, a.n-h)
	require.Equal(t, []Span{{Off: a.off, Len: a.n}}, early(), "block a, joined from its pieces, as one copy")
	land(b.off+2, b.n-2)
	require.Equal(t, []Span{{Off: a.off, Len: a.n}, {Off: b.off, Len: b.n}}, early())
	// The root's own block goes in by a local copy that never reports: Complete copies it.
	me := r.blocks[pRoot]
	mine := make([]byte, me.n)
	fill(rng, mine)
	r.write(dst, me.off, mine)
	copy(want[me.off:], mine)
	for i, blk := range r.blocks {
		if i != pRoot && blk.off != a.off && blk.off != b.off {
			land(blk.off, blk.n)
		}
	}
	require.NoError(t, r.stage.Complete(nil))
	require.Equal(t, want, r.read(r.dst, 0, r.big), "user's dst after the post")
}

// TestStageSetOutput: where the transport holds the output of each post in one of two
// buffers of its own (SetOutput), the copy-out, early (Landed) and at Complete, reads
// that buffer and never the stage's scratch, which gets garbage at every post: 100
// posts of fresh data, with every batching of the landed ranges. The report says so.
// SetOutput refuses a post in flight, a buffer of another type or too short, a stage
// whose output is not copied out, and a closed stage; nil goes back to the scratch.
func TestStageSetOutput(t *testing.T) {
	for _, batch := range []int{0, 1 << 10, 1 << 30} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			rng := newRand(t)
			r := newRig(t, collective.Gatherv, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach()})
			r.landed = true
			r.stage.earlyMin, r.stage.batchMin = 0, batch
			r.outs = []*mem.Buffer{newBuf(t, mem.Host, r.big), newBuf(t, mem.Host, r.big)}
			want := make([]byte, r.big)
			fill(rng, want)
			r.write(r.dst, 0, want)
			for range 100 {
				r.postGather(rng, want)
			}
			rep := r.stage.Report().Dst
			require.True(t, rep.Alternate, "%+v", rep)
			require.Contains(t, rep.String(), "two buffers")
			// The report outlives the transport's buffers: after Close, and with them
			// closed, it still says the same.
			require.NoError(t, r.stage.Close())
			for _, b := range r.outs {
				require.NoError(t, b.Close())
			}
			require.Equal(t, rep, r.stage.Report().Dst)
		})
	}
	t.Run("refused", func(t *testing.T) {
		r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach()})
		require.ErrorIs(t, r.stage.SetOutput(newBuf(t, mem.Host, r.big-1)), ErrInvalid, "too short")
		require.ErrorIs(t, r.stage.SetOutput(newBuf(t, mem.Sim, r.big)), ErrInvalid, "another type")
		require.NoError(t, r.stage.CopyIn())
		require.ErrorIs(t, r.stage.SetOutput(newBuf(t, mem.Host, r.big)), ErrBusy, "in flight")
		require.ErrorIs(t, r.stage.SetOutput(nil), ErrBusy, "nil in flight")
		require.Error(t, r.stage.Complete(errors.New("post failed")))
		require.NoError(t, r.stage.SetOutput(nil))
		require.False(t, r.stage.Report().Dst.Alternate)
		host := newRig(t, collective.Gather, mem.Host, mem.Host, rigOpts{reach: mem.DefaultReach()})
		require.ErrorIs(t, host.stage.SetOutput(newBuf(t, mem.Host, host.big)), ErrInvalid, "nothing copied out")
		require.NoError(t, r.stage.Close())
		require.ErrorIs(t, r.stage.SetOutput(newBuf(t, mem.Host, r.big)), ErrClosed)
		require.ErrorIs(t, r.stage.SetOutput(nil), ErrClosed)
	})
}

// TestStageEarlyMin: blocks are copied out as they land only from a scratch of
// earlyMin bytes on (defaultEarlyMin: below it one copy at completion costs less); a
// scratch a byte smaller waits for Complete. Either way the user's buffer ends right.
func TestStageEarlyMin(t *testing.T) {
	for _, c := range []struct {
		name  string
		above int // earlyMin - scratch bytes
		early bool
	}{{"scratch of earlyMin bytes", 0, true}, {"scratch a byte short of earlyMin", 1, false}} {
		t.Run(c.name, func(t *testing.T) {
			rng := newRand(t)
			r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach()})
			bytes := r.stage.Report().Dst.Bytes
			r.stage.earlyMin, r.stage.batchMin = bytes+c.above, 0
			require.NoError(t, r.stage.CopyIn())
			want := make([]byte, r.big)
			fill(rng, want)
			r.write(r.buf(r.stage.Dst()), 0, want)
			r.stage.Landed(0, r.big)
			require.Equal(t, c.early, len(r.stage.sides[1].early) > 0, "copies queued before completion")
			require.NoError(t, r.stage.Complete(nil))
			require.Equal(t, want, r.read(r.dst, 0, r.big))
			require.Equal(t, c.early, r.stage.Report().Dst.Landed)
		})
	}
}

// TestStageLandedStreamNotTakenBack: a copy stream that the caller's pool refuses to take
// back (WithStreams' put) fails the post as a failed copy-out does, and the next post
// works.
func TestStageLandedStreamNotTakenBack(t *testing.T) {
	rng := newRand(t)
	pool := newStreamPool(t)
	refused := errors.New("stream pool refused the stream")
	refuse := true
	put := func(s *mem.Stream) error {
		if err := pool.put(s); err != nil || !refuse {
			return err
		}
		refuse = false
		return refused
	}
	r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach(), opts: []Option{WithStreams(pool.get, put)}})
	r.stage.earlyMin, r.stage.batchMin = 0, 0
	want := make([]byte, r.big)
	fill(rng, want)
	require.NoError(t, r.stage.CopyIn())
	r.write(r.buf(r.stage.Dst()), 0, want)
	r.stage.Landed(0, r.big)
	require.NotEmpty(t, r.stage.sides[1].early, "the landed bytes were queued on a stream")
	err := r.stage.Complete(nil)
	require.ErrorIs(t, err, refused)
	require.ErrorContains(t, err, "copy-out of dst")
	require.False(t, r.stage.InFlight())
	r.landed = true
	r.write(r.dst, 0, want)
	r.postGather(rng, want)
}
