package hostcopy

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestCopy: every size around the piece and the limit, with a destination shorter,
// equal and longer, copies exactly min(len) bytes of fresh random data, and leaves the
// bytes around the destination untouched.
func TestCopy(t *testing.T) {
	checkCopier(t, Copy, []int{0, 1, piece - 1, piece, piece + 1, 3*piece + 7, maxPieced - 1, maxPieced, maxPieced + 1}, []int{16})
}

// TestStream: the same for Stream, with sizes around streamMin, a cache line and the
// assembly's chunk, and destinations at every offset within a cache line (the head
// before the first whole line, the tail after the last).
func TestStream(t *testing.T) {
	sizes := []int{0, 1, 63, 64, 65, streamMin - 1, streamMin, streamMin + 1, streamMin + 63,
		4096 + 17, streamChunk - 1, streamChunk, streamChunk + 64, 3*streamChunk + 129}
	offs := make([]int, 0, 65)
	for o := 0; o <= 64; o++ {
		offs = append(offs, o)
	}
	checkCopier(t, Stream, sizes, offs)
}

func checkCopier(t *testing.T, cp func(dst, src []byte) int, sizes, offs []int) {
	rnd := testutil.Rand(t)
	for _, n := range sizes {
		for _, dlen := range []int{n - 1, n, n + 1} {
			if dlen < 0 {
				continue
			}
			for _, off := range offs {
				srcOff := rnd.IntN(64)
				srcBack := make([]byte, n+64)
				for i := range srcBack {
					srcBack[i] = byte(rnd.Uint32())
				}
				src := srcBack[srcOff : srcOff+n]
				back := make([]byte, dlen+off+64)
				for i := range back {
					back[i] = byte(rnd.Uint32())
				}
				want := bytes.Clone(back)
				m := min(n, dlen)
				copy(want[off:off+m], src[:m])
				got := cp(back[off:off+dlen], src)
				require.Equal(t, m, got, "n %d dst %d off %d", n, dlen, off)
				require.True(t, bytes.Equal(want, back), "n %d dst %d off %d src off %d: wrong bytes", n, dlen, off, srcOff)
			}
		}
	}
}

// BenchmarkCopy/<size>/{copy,hostcopy,stream}: one copy() against Copy and Stream, on
// reused buffers.
func BenchmarkCopy(b *testing.B) {
	for _, n := range []int{512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20} {
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		b.Run(fmt.Sprintf("%dK/copy", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
		b.Run(fmt.Sprintf("%dK/hostcopy", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Copy(dst, src)
			}
		})
		b.Run(fmt.Sprintf("%dK/stream", n>>10), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Stream(dst, src)
			}
		})
	}
}
