package mem_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// Copy2DAsync between every pair of types: the rows land at their offsets, and every
// byte between and around them keeps what was there.
func TestCopy2DAsync(t *testing.T) { copy2DMatrix(t, copyTypes(false), false) }

// The same with CUDA, host memory pinned or not: with a CUDA side and pinned or CUDA
// memory on the other, the rows go as one cuMemcpy2DAsync; with pageable host memory,
// one copy per row.
func TestCUDACopy2DAsync(t *testing.T) {
	requireCUDA(t)
	copy2DMatrix(t, copyTypes(true), true)
}

func copy2DMatrix(t *testing.T, types []mem.Type, pinned bool) {
	const width, pitch, rows, srcOff, dstOff, size = 3000, 8192, 5, 17, 40, 64 << 10
	for _, dt := range types {
		for _, st := range types {
			for _, v := range []struct{ pin, ptr bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
				pin, ptr := v.pin, v.ptr
				if pin && (!pinned || dt != mem.Host && st != mem.Host) || ptr && (dt == mem.DM || st == mem.DM) {
					continue
				}
				name := dt.String() + "<-" + st.String() + map[bool]string{true: "/pinned"}[pin] + map[bool]string{true: "/ptr"}[ptr]
				t.Run(name, func(t *testing.T) {
					e := newEnv(t)
					src, sdata := e.randomized(st, size)
					dst, ddata := e.randomized(dt, size)
					if pin {
						for _, b := range []*mem.Buffer{src, dst} {
							if b.Type() == mem.Host {
								require.NoError(t, b.Pin())
							}
						}
					}
					s := newStream(t)
					// two queued copies, so that the second runs behind the first: the
					// last row of the second overwrites what the first wrote there
					cp := func(doff, soff, w, rows int) error {
						if ptr {
							return mem.CopyPtr2DAsync(s, dst.Addr()+uintptr(doff), dt, src.Addr()+uintptr(soff), st, w, pitch, rows)
						}
						return mem.Copy2DAsync(s, dst, doff, src, soff, w, pitch, rows)
					}
					require.NoError(t, cp(dstOff, srcOff, width, rows))
					require.NoError(t, cp(dstOff+(rows-1)*pitch, srcOff+(rows+1)*pitch, width/2, 1))
					require.NoError(t, s.Synchronize())
					want := append([]byte(nil), ddata...)
					for r := 0; r < rows; r++ {
						copy(want[dstOff+r*pitch:dstOff+r*pitch+width], sdata[srcOff+r*pitch:])
					}
					copy(want[dstOff+(rows-1)*pitch:dstOff+(rows-1)*pitch+width/2], sdata[srcOff+(rows+1)*pitch:])
					requireSameBytes(t, want, e.read(dst))
				})
			}
		}
	}
}

// Rows within one buffer: row r's copy reads what earlier rows left, in order.
func TestCopy2DAsyncSameBuffer(t *testing.T) {
	e := newEnv(t)
	b, data := e.randomized(mem.Host, 4096)
	s := newStream(t)
	// rows of 100 bytes from offset 0 to offset 50, pitch 100: row r reads [100r, 100r+100),
	// of which [100r, 100r+50) row r-1 has rewritten
	require.NoError(t, mem.Copy2DAsync(s, b, 50, b, 0, 100, 100, 4))
	require.NoError(t, s.Synchronize())
	want := append([]byte(nil), data...)
	for r := 0; r < 4; r++ {
		row := append([]byte(nil), want[100*r:100*r+100]...)
		copy(want[50+100*r:], row)
	}
	requireSameBytes(t, want, b.Bytes())
}

func TestCopy2DAsyncArgs(t *testing.T) {
	e := newEnv(t)
	h := e.alloc(mem.Host, 4096)
	g := e.alloc(mem.Host, 4096)
	s := newStream(t)
	require.ErrorContains(t, mem.Copy2DAsync(nil, h, 0, g, 0, 1, 1, 1), "stream is nil")
	require.ErrorContains(t, mem.Copy2DAsync(s, h, 0, g, 0, -1, 1, 1), "width must be >= 0")
	require.ErrorContains(t, mem.Copy2DAsync(s, h, 0, g, 0, 1, 1, -1), "rows must be >= 0")
	require.ErrorContains(t, mem.Copy2DAsync(s, h, 0, g, 0, 100, 99, 2), "pitch 99 is less than width 100")
	require.ErrorContains(t, mem.Copy2DAsync(s, h, 0, g, 0, 10, 1<<62, 4), "overflow")
	// from offset 1, the last row ends at 1+3*1024+1024 > 4096
	require.ErrorContains(t, mem.Copy2DAsync(s, h, 1, g, 0, 1024, 1024, 4), "dstOff 1 + n 4096 is out of range")
	require.ErrorContains(t, mem.Copy2DAsync(s, h, 0, nil, 0, 1, 1, 1), "src")
	require.ErrorContains(t, mem.CopyPtr2DAsync(s, h.Addr(), mem.Host, 0, mem.Host, 10, 10, 2), "src is a null host pointer")
	require.ErrorContains(t, mem.CopyPtr2DAsync(s, h.Addr(), mem.Host, g.Addr(), mem.DM, 10, 10, 2), "use Copy")
	require.ErrorContains(t, mem.CopyPtr2DAsync(nil, h.Addr(), mem.Host, g.Addr(), mem.Host, 10, 10, 2), "stream is nil")
	for _, c := range [][3]int{{0, 10, 3}, {10, 10, 0}, {0, 0, 0}} {
		require.NoError(t, mem.Copy2DAsync(s, h, 0, g, 0, c[0], c[1], c[2]), "width %d pitch %d rows %d copies nothing", c[0], c[1], c[2])
	}
	require.NoError(t, s.Synchronize())
}
