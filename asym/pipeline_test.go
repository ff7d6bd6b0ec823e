package asym

import (
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
