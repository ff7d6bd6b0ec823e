package hostcopy

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestCopy: every size around the piece and the limit, with a destination shorter,
// equal and longer, copies exactly min(len) bytes of fresh random data at an odd
// offset, and leaves the bytes around the destination untouched.
func TestCopy(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, n := range []int{0, 1, piece - 1, piece, piece + 1, 3*piece + 7, maxPieced - 1, maxPieced, maxPieced + 1} {
		for _, dlen := range []int{n - 1, n, n + 1} {
			if dlen < 0 {
				continue
			}
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(rnd.Uint32())
			}
			back := make([]byte, dlen+32)
			for i := range back {
				back[i] = byte(rnd.Uint32())
			}
			want := bytes.Clone(back)
			m := min(n, dlen)
			copy(want[16:16+m], src[:m])
			got := Copy(back[16:16+dlen], src)
			require.Equal(t, m, got, "n %d dst %d", n, dlen)
			require.True(t, bytes.Equal(want, back), "n %d dst %d: wrong bytes", n, dlen)
		}
	}
}

// BenchmarkCopy/<size>/{copy,hostcopy}: one copy() against Copy, on reused buffers.
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
	}
}
