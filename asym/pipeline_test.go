package asym

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
)

// TestStagePipelinedCopyIn: a large sim source is copied in beside the transport.
// Ready answers per range, every range becomes ready, the scratch ends up with the
// post's fresh data, the copies are counted once, Complete waits for the copy-in, and
// a copy-in fault fails the post before anything starts.
func TestStagePipelinedCopyIn(t *testing.T) {
	const size, block = 4, 3<<20 + 5
	rng := newRand(t)
	plan, err := Plan(Args{Coll: collective.Scatter, Root: 0, Rank: 0, Size: size, DtypeSize: 1,
		Src: Buf{Type: mem.Sim, Count: size * block}, Dst: Buf{Type: mem.Host, Count: block}}, mem.DefaultReach())
	require.NoError(t, err)
	require.True(t, plan.Src.Needed && plan.Src.CopyIn && plan.Src.Bytes >= DefaultPipelineMin, "%v", plan)
	src, dst := newBuf(t, mem.Sim, size*block), newBuf(t, mem.Host, block)
	f := fault.NewSet([]fault.Fault{{Kind: fault.CopyIn, N: 3}}, 0)
	st, err := NewStage(plan, UserBufOf(src), UserBufOf(dst), &fakeRegistrar{}, WithFaults(f))
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	probe := newBuf(t, mem.Host, size*block)
	for post := 1; post <= 4; post++ {
		data := make([]byte, size*block)
		fill(rng, data)
		copy(probe.Bytes(), data)
		require.NoError(t, mem.Copy(src, 0, probe, 0, len(data)))
		err := st.CopyIn()
		if post == 3 {
			require.ErrorIs(t, err, ErrInjected, "the third copy-in is the injected fault")
			require.False(t, st.InFlight())
			ok, rerr := st.Ready(0, size*block)
			require.True(t, ok, "no copy-in runs after a refused post")
			require.NoError(t, rerr)
			continue
		}
		require.NoError(t, err)
		// The transport reads blocks in its own order once each is ready.
		for _, b := range rng.Perm(size) {
			for {
				ok, err := st.Ready(b*block, block)
				require.NoError(t, err)
				if ok {
					break
				}
			}
			require.NoError(t, mem.Copy(probe, 0, st.Src().Buf, b*block, block))
			require.Equal(t, data[b*block:(b+1)*block], probe.Bytes()[:block], "post %d block %d", post, b)
		}
		// Once the copy ended, CopyingIn says true exactly once more: the waiter
		// that last polled before the end must poll again, not sleep.
		<-st.pipe.Load().done
		require.True(t, st.CopyingIn(), "post %d: the first look after the end asks for one more poll", post)
		require.False(t, st.CopyingIn(), "post %d: then the waiter may sleep", post)
		require.NoError(t, st.Complete(nil))
		require.False(t, st.CopyingIn())
	}
	rep := st.Report()
	require.Equal(t, int64(3*size*block), rep.Copied, "three posts copied the source once each")
	require.Contains(t, rep.Src.String(), " beside the wire")
}

// TestPipeChunkFor: a pipelined copy-in moves in quarters of its source, each a whole
// number of MiB, never shorter than pipeChunkMin nor longer than pipeChunk (the copy
// engine's long steps); the report names the step.
func TestPipeChunkFor(t *testing.T) {
	for _, n := range []int{DefaultPipelineMin, 1<<20 + 5, 3 << 20, 4 << 20, 8<<20 - 1, 16 << 20, 64 << 20, 1 << 30} {
		c := pipeChunkFor(n)
		require.Zero(t, c%pipeChunkMin, "n=%d: chunk %d is no whole number of MiB", n, c)
		require.LessOrEqual(t, c, pipeChunk, "n=%d", n)
		require.GreaterOrEqual(t, c, pipeChunkMin, "n=%d", n)
		switch {
		case c == pipeChunkMin:
			require.Less(t, n, 8*pipeChunkMin, "n=%d: a chunk of the least size though a quarter is more", n)
		case c < pipeChunk:
			require.GreaterOrEqual(t, (n+c-1)/c, 4, "n=%d: chunk %d gives fewer than four steps", n, c)
		default:
			require.GreaterOrEqual(t, n, 4*pipeChunk, "n=%d: chunk %d is the most though a quarter is less", n, c)
		}
	}
	require.Equal(t, 1<<20, pipeChunkFor(4<<20))
	require.Equal(t, 2<<20, pipeChunkFor(8<<20))
	require.Contains(t, SideReport{Staged: true, User: mem.CUDA, Scratch: mem.Host, Bytes: 8 << 20, CopyIn: true,
		Beside: true, Chunk: pipeChunkFor(8 << 20)}.String(), "in chunks of 2 MiB beside the wire")
}

// gatedRegion is a DM user source whose reads, the steps of a pipelined copy-in, wait
// for the test: each CopyFrom announces its range on steps and waits for a reply,
// copying when the reply is nil and failing with it otherwise. The test thereby sees
// what Ready answers between two steps, with nothing timed. It is its own allocator.
type gatedRegion struct {
	b     []byte
	open  atomic.Bool // set: reads no longer wait (the test is over)
	steps chan Span
	reply chan error
}

func newGatedRegion(size int) *gatedRegion {
	// Buffered, one each: a read that saw the gate shut just before release still
	// finds the reply that release leaves (see release).
	return &gatedRegion{b: make([]byte, size), steps: make(chan Span, 1), reply: make(chan error, 1)}
}

func (g *gatedRegion) Alloc(size int) (mem.Region, error) { return g, nil }
func (g *gatedRegion) Offset() int                        { return 0 }
func (g *gatedRegion) Len() int                           { return len(g.b) }
func (g *gatedRegion) Close() error                       { return nil }
func (g *gatedRegion) CopyTo(off int, src []byte) error {
	copy(g.b[off:], src)
	return nil
}

func (g *gatedRegion) CopyFrom(dst []byte, off int) error {
	if !g.open.Load() {
		g.steps <- Span{Off: off, Len: len(dst)}
		if err := <-g.reply; err != nil {
			return err
		}
	}
	copy(dst, g.b[off:])
	return nil
}

// release lets every read through, so that a test that failed mid-post does not leave
// the copy-in goroutine (and the Complete of the cleanup) blocked.
func (g *gatedRegion) release() {
	g.open.Store(true)
	select {
	case <-g.steps:
	default:
	}
	select {
	case g.reply <- nil:
	default:
	}
}

// TestStagePipelinedSteps follows a pipelined copy-in step by step, over a v-layout
// source whose two spans are apart by less than a step: while step i runs, Ready says
// yes exactly for the bytes the steps before it copied (a range that ends where they
// end included, one byte of the next span not, though it lies within a step of the
// last end), and those bytes are the post's. A step that fails makes Ready return its
// error, never "ready", and fails the post at Complete although the transport
// succeeded; the next post works.
func TestStagePipelinedSteps(t *testing.T) {
	const mib = 1 << 20
	rng := newRand(t)
	counts, displs := []int{mib + 10, 2 * mib}, []int{0, mib + 100}
	total := displs[1] + counts[1]
	// Nothing but host is reachable: the DM source goes through a host scratch.
	plan, err := Plan(Args{Coll: collective.Scatterv, Root: 0, Rank: 0, Size: 2, DtypeSize: 1,
		Src: Buf{Type: mem.DM, Counts: counts, Displs: displs}, Dst: Buf{Type: mem.Host, Count: counts[0]}}, mem.Reach{})
	require.NoError(t, err)
	require.Equal(t, []Span{{0, mib + 10}, {mib + 100, 2 * mib}}, plan.Src.Spans)
	require.True(t, plan.Src.Needed && plan.Src.CopyIn && plan.Src.Type == mem.Host, "%v", plan)
	require.Equal(t, mib, pipeChunkFor(3*mib+10), "the steps below are of 1 MiB")
	steps := []Span{{0, mib}, {mib, 10}, {mib + 100, mib}, {2*mib + 100, mib}}

	g := newGatedRegion(total)
	src, err := mem.AllocFrom(mem.DM, g, total)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, src.Close()) })
	dst := newBuf(t, mem.Host, counts[0])
	st, err := NewStage(plan, UserBufOf(src), UserBufOf(dst), &fakeRegistrar{}, WithPipelineMin(1))
	require.NoError(t, err)
	t.Cleanup(func() {
		if st.InFlight() {
			_ = st.Complete(errors.New("test failed"))
		}
		require.NoError(t, st.Close())
	})
	t.Cleanup(g.release) // runs first
	ready := func(off, n int) bool {
		ok, err := st.Ready(off, n)
		require.NoError(t, err)
		return ok
	}
	stepFails := errors.New("dm read failed")

	// post copies a fresh source in, failing step failAt (none when -1).
	post := func(failAt int) {
		data := make([]byte, total)
		fill(rng, data)
		copy(g.b, data)
		require.NoError(t, st.CopyIn())
		require.True(t, st.Report().Src.Beside)
		scratch := st.Src().Buf.Bytes()
		for i, step := range steps {
			require.Equal(t, step, <-g.steps, "step %d", i)
			done := 0 // the end of the bytes copied in before this step
			if i > 0 {
				done = steps[i-1].Off + steps[i-1].Len
				require.True(t, ready(0, done), "step %d: what the steps before copied is ready", i)
			}
			require.False(t, ready(step.Off, 1), "step %d: its first byte is not in place yet", i)
			for _, sp := range plan.Src.Spans {
				if end := min(sp.Off+sp.Len, done); end > sp.Off {
					require.Equal(t, data[sp.Off:end], scratch[sp.Off:end], "step %d: bytes ready", i)
				}
			}
			if i == failAt {
				g.reply <- stepFails
				for {
					ok, err := st.Ready(0, total)
					if err != nil {
						require.ErrorIs(t, err, stepFails)
						break
					}
					require.False(t, ok, "a copy-in that failed reports its bytes ready")
					runtime.Gosched()
				}
				err := st.Complete(nil)
				require.ErrorIs(t, err, stepFails, "the transport succeeded, the copy-in did not")
				require.ErrorContains(t, err, "copy-in of src")
				require.False(t, st.InFlight())
				return
			}
			g.reply <- nil
		}
		require.NoError(t, st.Complete(nil))
		require.Equal(t, data[:mib+10], scratch[:mib+10])
		require.Equal(t, data[mib+100:], scratch[mib+100:])
	}
	post(-1)
	post(1)
	post(-1)
	require.Equal(t, 3, st.Report().Posts)
}

// TestStagePipelinedWhen: the copy-in runs beside the transport for a source not in
// host memory whose copy-in moves at least the threshold's bytes (WithPipelineMin:
// DefaultPipelineMin for 0, never for a negative one), and before CopyIn returns
// otherwise; either way the scratch gets the post's data.
func TestStagePipelinedWhen(t *testing.T) {
	const n = 2 << 20
	require.GreaterOrEqual(t, n, DefaultPipelineMin)
	for _, c := range []struct {
		name   string
		st, dt mem.Type
		reach  mem.Reach
		opts   []Option
		beside bool
	}{
		{"sim source at the threshold", mem.Sim, mem.Host, mem.DefaultReach(), []Option{WithPipelineMin(n)}, true},
		{"sim source a byte below it", mem.Sim, mem.Host, mem.DefaultReach(), []Option{WithPipelineMin(n + 1)}, false},
		{"default threshold", mem.Sim, mem.Host, mem.DefaultReach(), []Option{WithPipelineMin(0)}, true},
		{"negative threshold: never", mem.Sim, mem.Host, mem.DefaultReach(), []Option{WithPipelineMin(-1)}, false},
		{"host source", mem.Host, mem.Sim, mem.AllReachable(), []Option{WithPipelineMin(1)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := newRand(t)
			plan, err := Plan(Args{Coll: collective.Scatter, Root: 0, Rank: 0, Size: 2, DtypeSize: 1,
				Src: Buf{Type: c.st, Count: n}, Dst: Buf{Type: c.dt, Count: n / 2}}, c.reach)
			require.NoError(t, err)
			require.True(t, plan.Src.Needed && plan.Src.CopyIn && plan.Src.Bytes == n, "%v", plan)
			src, dst, probe := newBuf(t, c.st, n), newBuf(t, c.dt, n/2), newBuf(t, mem.Host, n)
			st, err := NewStage(plan, UserBufOf(src), UserBufOf(dst), &fakeRegistrar{}, c.opts...)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, st.Close()) })
			require.Equal(t, c.beside, st.Report().Src.Beside)
			fill(rng, probe.Bytes())
			data := append([]byte(nil), probe.Bytes()...)
			require.NoError(t, mem.Copy(src, 0, probe, 0, n))
			require.NoError(t, st.CopyIn())
			// A copy beside the wire is running, or has ended and asks for one more
			// poll; a copy before the wire has ended, with nothing to poll for.
			require.Equal(t, c.beside, st.CopyingIn())
			for {
				ok, err := st.Ready(0, n)
				require.NoError(t, err)
				if ok {
					break
				}
				runtime.Gosched()
			}
			clear(probe.Bytes())
			require.NoError(t, mem.Copy(probe, 0, st.Src().Buf, 0, n))
			require.Equal(t, data, probe.Bytes())
			require.NoError(t, st.Complete(nil))
		})
	}
}
