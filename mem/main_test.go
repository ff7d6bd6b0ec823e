package mem_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestMain fails the run if any Buffer is still open at exit: a leak is a bug.
func TestMain(m *testing.M) {
	testutil.LeakCheck(m, func() error {
		if n := mem.Live(); n != 0 {
			return fmt.Errorf("mem: %d buffers still open at exit", n)
		}
		return nil
	})
}

// requireCUDA skips the test when CUDA is unavailable, and fails it instead
// where IBCOLL_REQUIRE names cuda (the GPU machine).
func requireCUDA(t testing.TB) {
	t.Helper()
	if mem.CUDAAvailable() {
		return
	}
	_, err := mem.Alloc(mem.CUDA, 1)
	testutil.RequireCUDA(t, false, fmt.Sprintf("CUDA not available: %v", err))
}

func newRand(t testing.TB) *rand.Rand { return testutil.Rand(t) }

func randBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			p[i+j] = byte(v >> (8 * j))
		}
	}
	return p
}

// requireSameBytes reports the first difference instead of dumping megabytes.
func requireSameBytes(t testing.TB, want, got []byte, msgAndArgs ...any) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	require.Equal(t, len(want), len(got), msgAndArgs...)
	i := 0
	for want[i] == got[i] {
		i++
	}
	lo, hi := max(i-4, 0), min(i+12, len(want))
	require.Failf(t, "bytes differ", "first difference at %d of %d: want % x, got % x; %s",
		i, len(want), want[lo:hi], got[lo:hi], fmt.Sprint(msgAndArgs...))
}

// fakeDM stands in for NIC device memory: a bounded space handed out in
// aligned regions that the CPU reaches only through CopyTo and CopyFrom.
type fakeDM struct {
	mu      sync.Mutex
	mem     []byte
	next    int
	live    int
	last    *fakeRegion
	failErr error // returned by every region copy when set
}

func newFakeDM(t testing.TB, size int) *fakeDM {
	f := &fakeDM{mem: make([]byte, size)}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		require.Zero(t, f.live, "fake dm regions still open")
	})
	return f
}

func (f *fakeDM) Alloc(size int) (mem.Region, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	off := (f.next + 63) &^ 63
	if size <= 0 || off+size > len(f.mem) {
		return nil, fmt.Errorf("fake dm: %d bytes at %d of %d: %w", size, off, len(f.mem), unix.ENOMEM)
	}
	f.next = off + size
	f.live++
	f.last = &fakeRegion{f: f, off: off, n: size}
	return f.last, nil
}

func (f *fakeDM) lastRegion() *fakeRegion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fakeDM) fail(err error) {
	f.mu.Lock()
	f.failErr = err
	f.mu.Unlock()
}

type fakeRegion struct {
	f      *fakeDM
	off, n int
	closed bool
	busy   bool // Close answers EBUSY, as ibv_free_dm does while an MR lives
}

func (r *fakeRegion) Offset() int { return r.off }
func (r *fakeRegion) Len() int    { return r.n }

func (r *fakeRegion) check(off, n int) ([]byte, error) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	switch {
	case r.closed:
		return nil, errors.New("fake dm: region closed")
	case r.f.failErr != nil:
		return nil, r.f.failErr
	case off < 0 || n < 0 || off+n > r.n:
		return nil, fmt.Errorf("fake dm: [%d, %d) outside region of %d: %w", off, off+n, r.n, unix.EINVAL)
	}
	return r.f.mem[r.off+off : r.off+off+n], nil
}

func (r *fakeRegion) CopyTo(off int, src []byte) error {
	p, err := r.check(off, len(src))
	if err == nil {
		copy(p, src)
	}
	return err
}

func (r *fakeRegion) CopyFrom(dst []byte, off int) error {
	p, err := r.check(off, len(dst))
	if err == nil {
		copy(dst, p)
	}
	return err
}

func (r *fakeRegion) Close() error {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	if r.busy {
		return unix.EBUSY
	}
	if !r.closed {
		r.closed = true
		r.f.live--
	}
	return nil
}

// env allocates buffers of any type, closes them at cleanup, and fills and
// reads them by paths independent of the copy under test where one exists.
type env struct {
	t  testing.TB
	r  *rand.Rand
	dm *fakeDM
}

func newEnv(t testing.TB) *env {
	return &env{t: t, r: newRand(t), dm: newFakeDM(t, 64<<20)}
}

func (e *env) alloc(typ mem.Type, size int) *mem.Buffer {
	e.t.Helper()
	var (
		b   *mem.Buffer
		err error
	)
	if typ == mem.DM {
		b, err = mem.AllocFrom(mem.DM, e.dm, size)
	} else {
		b, err = mem.Alloc(typ, size)
	}
	require.NoError(e.t, err, "alloc %s %d", typ, size)
	e.t.Cleanup(func() { require.NoError(e.t, b.Close()) })
	return b
}

func (e *env) write(b *mem.Buffer, p []byte) {
	e.t.Helper()
	require.Equal(e.t, b.Len(), len(p))
	switch b.Type() {
	case mem.Host, mem.CUDAManaged:
		copy(b.Bytes(), p)
	case mem.Sim:
		copy(mem.SimAlias(b), p)
	case mem.DM:
		copy(e.dm.mem[b.Addr():], p)
	case mem.CUDA:
		h := e.alloc(mem.Host, len(p))
		copy(h.Bytes(), p)
		require.NoError(e.t, mem.Copy(b, 0, h, 0, len(p)))
	}
}

func (e *env) read(b *mem.Buffer) []byte {
	e.t.Helper()
	p := make([]byte, b.Len())
	switch b.Type() {
	case mem.Host, mem.CUDAManaged:
		copy(p, b.Bytes())
	case mem.Sim:
		copy(p, mem.SimAlias(b))
	case mem.DM:
		copy(p, e.dm.mem[b.Addr():])
	case mem.CUDA:
		h := e.alloc(mem.Host, len(p))
		require.NoError(e.t, mem.Copy(h, 0, b, 0, len(p)))
		copy(p, h.Bytes())
	}
	return p
}

// randomized allocates a buffer of typ and fills it with fresh random data,
// which it returns.
func (e *env) randomized(typ mem.Type, size int) (*mem.Buffer, []byte) {
	e.t.Helper()
	b := e.alloc(typ, size)
	p := randBytes(e.r, size)
	e.write(b, p)
	return b, p
}

// copyTypes lists the types a copy test covers: the CUDA ones only where
// they exist.
func copyTypes(cuda bool) []mem.Type {
	ts := []mem.Type{mem.Host, mem.Sim, mem.DM}
	if cuda {
		ts = append(ts, mem.CUDA, mem.CUDAManaged)
	}
	return ts
}

// peek reads one byte at a raw address, as code that forgets staging would.
func peek(a uintptr) byte {
	return *(*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&a)))
}

// readPtr returns n bytes read from addr, of type t (the address is converted in the
// call, which CopyPtr keeps in place: TestCopyPtrStackSlice).
func readPtr(addr uintptr, t mem.Type, n int) ([]byte, error) {
	out := make([]byte, n)
	if n == 0 {
		return out, nil
	}
	return out, mem.CopyPtr(uintptr(unsafe.Pointer(&out[0])), mem.Host, addr, t, n)
}
