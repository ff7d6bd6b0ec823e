package tlmlx5

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestCopySegStream: a local copy into a buffer marked stream (pinned staging
// scratch) lands exactly, at sizes around the non-temporal path's thresholds and at
// unaligned offsets, and leaves the bytes around it untouched.
func TestCopySegStream(t *testing.T) {
	r := testutil.Rand(t)
	const size = 1<<20 + 256
	k := &task{}
	for _, stream := range []bool{true, false} {
		dst := &lbuf{n: size, typ: mem.Host, host: make([]byte, size), stream: stream}
		src := &lbuf{n: size, typ: mem.Host, host: make([]byte, size)}
		for _, n := range []int{1, 63, 1 << 10, 4096 + 17, 64 << 10, 1 << 20} {
			off, at := r.IntN(65), r.IntN(65)
			testutil.Fill(r, src.host)
			testutil.Fill(r, dst.host)
			want := bytes.Clone(dst.host)
			copy(want[off:off+n], src.host[at:at+n])
			require.NoError(t, k.copySeg(seg{dst, off, n}, seg{src, at, n}))
			testutil.Equal(t, want, dst.host, fmt.Sprintf("stream %v, %d bytes at %d from %d", stream, n, off, at))
		}
	}
}

// TestPinnedDstStreams: the transport marks a destination that is a pinned host
// buffer (staging scratch that the copy engine reads next) for non-temporal copies,
// and no other. Pinning needs CUDA: the GPU machine runs it (IBCOLL_REQUIRE=cuda).
func TestPinnedDstStreams(t *testing.T) {
	pinned, err := mem.Alloc(mem.Host, 1<<16)
	require.NoError(t, err)
	defer pinned.Close()
	err = pinned.Pin()
	testutil.RequireCUDA(t, err == nil, fmt.Sprintf("pinning host memory: %v", err))
	plain, err := mem.Alloc(mem.Host, 1<<16)
	require.NoError(t, err)
	defer plain.Close()
	ft := newFakeTeam(t, 2, nil)
	rnd := rand.New(rand.NewPCG(3, 5))
	for _, c := range []struct {
		buf  *mem.Buffer
		want bool
	}{{pinned, true}, {plain, false}} {
		cs := newCase(rnd, collective.Gather, "", 2, 0, 1024, false)
		runs := cs.build(t, ft.newSeq())
		spec := runs[0].spec
		spec.Dst.Slice, spec.Dst.Buf, spec.Dst.Addr = nil, c.buf, c.buf.Addr()
		tk, err := ft.newTask(0, &spec)
		require.NoError(t, err)
		require.Equal(t, c.want, tk.(*task).dst.stream, "pinned %v", c.buf.Pinned())
		require.NoError(t, tk.Close())
	}
}
