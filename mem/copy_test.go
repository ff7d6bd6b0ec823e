package mem_test

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

var copySizes = []int{1, 3, 4095, 4096, 1<<20 + 7}

// checkCopy copies n bytes between fresh random buffers at random offsets and
// checks both the copied bytes and that nothing around them changed.
func checkCopy(t *testing.T, e *env, dstT, srcT mem.Type, n int, async *mem.Stream) {
	t.Helper()
	srcOff, dstOff := e.r.IntN(100), e.r.IntN(100)
	src, srcData := e.randomized(srcT, srcOff+n+e.r.IntN(16))
	dst, dstData := e.randomized(dstT, dstOff+n+e.r.IntN(16))
	if async != nil {
		require.NoError(t, mem.CopyAsync(async, dst, dstOff, src, srcOff, n))
		require.NoError(t, async.Synchronize())
	} else {
		require.NoError(t, mem.Copy(dst, dstOff, src, srcOff, n))
	}
	want := append([]byte(nil), dstData...)
	copy(want[dstOff:], srcData[srcOff:srcOff+n])
	got := e.read(dst)
	requireSameBytes(t, want, got, fmt.Sprintf("%s -> %s, n %d, srcOff %d, dstOff %d%s", srcT, dstT, n, srcOff, dstOff, staleWhy(got, want, dstData)))
	requireSameBytes(t, srcData, e.read(src), "src changed")
}

// staleWhy says, for a copy whose destination differs from want, whether the first 16
// bytes that differ are the destination's bytes from before the copy (the copy, or
// the write of the destination's old bytes, ran late) or others (a stale source).
func staleWhy(got, want, old []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	if i == len(got) || len(got) != len(old) {
		return ""
	}
	end := min(i+16, len(got))
	if bytes.Equal(got[i:end], old[i:end]) {
		return ": the destination kept its old bytes there"
	}
	return ": bytes there are neither the source's nor the destination's old ones"
}

func copyMatrix(t *testing.T, types []mem.Type, cudaOnly bool, async bool) {
	e := newEnv(t)
	var s *mem.Stream
	if async {
		var err error
		s, err = mem.NewStream()
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
	}
	for _, srcT := range types {
		for _, dstT := range types {
			if cudaOnly && !isCUDA(srcT) && !isCUDA(dstT) {
				continue
			}
			t.Run(srcT.String()+"->"+dstT.String(), func(t *testing.T) {
				e := *e
				e.t = t
				for _, n := range copySizes {
					checkCopy(t, &e, dstT, srcT, n, s)
				}
			})
		}
	}
}

func isCUDA(t mem.Type) bool { return t == mem.CUDA || t == mem.CUDAManaged }

func TestCopyMatrix(t *testing.T) { copyMatrix(t, copyTypes(false), false, false) }

func TestCopyAsyncMatrix(t *testing.T) { copyMatrix(t, copyTypes(false), false, true) }

// Overlapping ranges of one buffer copy as by memmove, for every type,
// including those that stage through bounce chunks (more than one chunk).
func TestCopyOverlap(t *testing.T) {
	testOverlap(t, copyTypes(false))
}

func testOverlap(t *testing.T, types []mem.Type) {
	e := newEnv(t)
	n := 2*mem.BounceSize + 5
	for _, typ := range types {
		for _, shift := range []int{1, 4096, -1, -4096, mem.BounceSize + 3, -(mem.BounceSize + 3)} {
			t.Run(fmt.Sprintf("%s/%+d", typ, shift), func(t *testing.T) {
				e := *e
				e.t = t
				b, data := e.randomized(typ, n+2*mem.BounceSize+8)
				srcOff := mem.BounceSize + 4
				dstOff := srcOff + shift
				require.NoError(t, mem.Copy(b, dstOff, b, srcOff, n))
				want := append([]byte(nil), data...)
				copy(want[dstOff:dstOff+n], want[srcOff:srcOff+n])
				requireSameBytes(t, want, e.read(b))
			})
		}
	}
}

func TestCopyArgs(t *testing.T) {
	e := newEnv(t)
	h := e.alloc(mem.Host, 100)
	d := e.alloc(mem.DM, 100)
	closed, err := mem.Alloc(mem.Sim, 100)
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	for _, tc := range []struct {
		name      string
		dst       *mem.Buffer
		dstOff    int
		src       *mem.Buffer
		srcOff, n int
		msg       string
	}{
		{"nil dst", nil, 0, h, 0, 1, "dst is nil"},
		{"nil src", h, 0, nil, 0, 1, "src is nil"},
		{"closed src", h, 0, closed, 0, 1, "src is closed"},
		{"closed dst", closed, 0, h, 0, 0, "dst is closed"},
		{"negative n", h, 0, d, 0, -1, "n must be >= 0"},
		{"negative dstOff", h, -1, d, 0, 1, "dstOff -1"},
		{"negative srcOff", h, 0, d, -5, 1, "srcOff -5"},
		{"dst overrun", h, 50, d, 0, 51, "dstOff 50 + n 51 is out of range of dst's 100 bytes"},
		{"src overrun", h, 0, d, 99, 2, "srcOff 99 + n 2 is out of range of src's 100 bytes"},
		{"offset past end", h, 101, d, 0, 0, "dstOff 101"},
		{"huge n", h, 1, d, 0, int(^uint(0) >> 1), "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mem.Copy(tc.dst, tc.dstOff, tc.src, tc.srcOff, tc.n)
			require.ErrorIs(t, err, mem.ErrInvalid)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	require.NoError(t, mem.Copy(h, 100, d, 100, 0), "n == 0 at the end is a no-op")
}

func TestCopyDMError(t *testing.T) {
	e := newEnv(t)
	h := e.alloc(mem.Host, 64)
	d := e.alloc(mem.DM, 64)
	boom := fmt.Errorf("injected")
	e.dm.fail(boom)
	defer e.dm.fail(nil)
	require.ErrorIs(t, mem.Copy(h, 0, d, 0, 64), boom)
	require.ErrorIs(t, mem.Copy(d, 0, h, 0, 64), boom)
	require.ErrorIs(t, mem.Copy(d, 0, d, 32, 32), boom)
}

func TestCopyPtr(t *testing.T) {
	e := newEnv(t)
	sim, simData := e.randomized(mem.Sim, 10000)
	user := randBytes(e.r, 5000)
	up := uintptr(unsafe.Pointer(&user[0]))

	// user slice -> interior of a sim buffer
	require.NoError(t, mem.CopyPtr(sim.Addr()+1234, mem.Sim, up, mem.Host, 5000))
	copy(simData[1234:], user)
	requireSameBytes(t, simData, e.read(sim))

	// interior of a sim buffer -> user slice
	out, err := readPtr(sim.Addr()+7000, mem.Sim, 3000)
	require.NoError(t, err)
	requireSameBytes(t, simData[7000:], out)

	// host -> host, overlapping
	want := append([]byte(nil), user...)
	copy(want[10:], want[:4000])
	require.NoError(t, mem.CopyPtr(up+10, mem.Host, up, mem.Host, 4000))
	requireSameBytes(t, want, user)

	for _, tc := range []struct {
		name string
		dst  uintptr
		dt   mem.Type
		src  uintptr
		st   mem.Type
		n    int
		is   error
		msg  string
	}{
		{"sim overrun", sim.Addr() + 9000, mem.Sim, up, mem.Host, 1001, mem.ErrInvalid, "out of range"},
		{"not sim", up, mem.Sim, up, mem.Host, 1, mem.ErrInvalid, "not in any open sim buffer"},
		{"dm", 0, mem.DM, up, mem.Host, 1, mem.ErrNotSupported, "use Copy"},
		{"null host", 0, mem.Host, up, mem.Host, 1, mem.ErrInvalid, "null host pointer"},
		{"negative n", up, mem.Host, up, mem.Host, -1, mem.ErrInvalid, "n must be >= 0"},
		{"bad type", up, mem.Type(77), up, mem.Host, 1, mem.ErrInvalid, "Type(77)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mem.CopyPtr(tc.dst, tc.dt, tc.src, tc.st, tc.n)
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	require.NoError(t, mem.CopyPtr(0, mem.Host, 0, mem.Host, 0), "n == 0 is a no-op")
}

// TestCopyPtrStackSlice: a Go slice whose address goes to CopyPtr in the call itself
// is kept in place for the copy (go:uintptrescapes). Without that, a slice on the stack
// of a fresh goroutine moved when CopyPtr's path grew the stack, and the bytes went to
// the old stack (a coll test lost its byte so, under -race).
func TestCopyPtrStackSlice(t *testing.T) {
	e := newEnv(t)
	sim, data := e.randomized(mem.Sim, 8)
	for range 100 {
		done := make(chan [8]byte)
		go func() {
			got := make([]byte, 8)
			if err := mem.CopyPtr(uintptr(unsafe.Pointer(&got[0])), mem.Host, sim.Addr(), mem.Sim, 8); err != nil {
				panic(err)
			}
			done <- [8]byte(got)
		}()
		got := <-done
		require.Equal(t, data, got[:])
	}
}
