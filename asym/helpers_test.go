package asym

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestMain fails the run when a test leaked a buffer or a registration.
func TestMain(m *testing.M) {
	testutil.LeakCheck(m, memLeaks, func() error {
		if n := liveRegs.Load(); n != 0 {
			return fmt.Errorf("asym: %d registrations still open at exit", n)
		}
		return nil
	})
}

func memLeaks() error {
	if n := mem.Live(); n != 0 {
		return fmt.Errorf("%d mem buffers still open at exit", n)
	}
	return nil
}

func newRand(t testing.TB) *rand.Rand { return testutil.Rand(t) }

// fill writes random bytes, none of them zero, so that a copy that did not happen never
// passes for one that copied zeros.
func fill(r *rand.Rand, p []byte) {
	for i := range p {
		p[i] = byte(1 + r.IntN(255))
	}
}

// liveRegs counts the fake registrations still open, over every fakeRegistrar.
var liveRegs atomic.Int64

// fakeRegistrar stands in for the transport. It checks that a registration is closed
// once, while its buffer is still allocated, and logs the order of deregistrations.
type fakeRegistrar struct {
	fail      error        // returned by every Register when set
	failClose atomic.Int64 // that many deregistrations fail, then they work
	live      atomic.Int64
	order     []*mem.Buffer // deregistered buffers, in order; not for concurrent use
}

type fakeReg struct {
	r      *fakeRegistrar
	buf    *mem.Buffer
	closed bool
}

func (f *fakeRegistrar) Register(b *mem.Buffer) (io.Closer, error) {
	if f.fail != nil {
		return nil, f.fail
	}
	f.live.Add(1)
	liveRegs.Add(1)
	return &fakeReg{r: f, buf: b}, nil
}

func (g *fakeReg) Close() error {
	if g.r.failClose.Add(-1) >= 0 {
		return unix.EIO
	}
	if g.closed {
		return fmt.Errorf("fake: registration closed twice")
	}
	if g.buf.Type() != mem.DM && g.buf.Addr() == 0 {
		return fmt.Errorf("fake: buffer freed before its deregistration")
	}
	g.closed = true
	g.r.live.Add(-1)
	liveRegs.Add(-1)
	g.r.order = append(g.r.order, g.buf)
	return nil
}

// fakeDM is NIC device memory for tests: a mem.Allocator whose regions are plain Go
// memory reached only through CopyTo and CopyFrom, like mlx5 MEMIC.
type fakeDM struct{ next int }

type fakeRegion struct {
	off    int
	b      []byte
	closed bool
}

func (d *fakeDM) Alloc(size int) (mem.Region, error) {
	r := &fakeRegion{off: d.next, b: make([]byte, size)}
	d.next += (size + 63) &^ 63
	return r, nil
}

func (r *fakeRegion) Offset() int { return r.off }
func (r *fakeRegion) Len() int    { return len(r.b) }
func (r *fakeRegion) CopyTo(off int, src []byte) error {
	copy(r.b[off:], src)
	return nil
}
func (r *fakeRegion) CopyFrom(dst []byte, off int) error {
	copy(dst, r.b[off:])
	return nil
}
func (r *fakeRegion) Close() error {
	r.closed = true
	return nil
}

// allocOn is an AllocFunc that takes DM from d and everything else from mem.Alloc.
func allocOn(d *fakeDM) AllocFunc {
	return func(t mem.Type, size int) (*mem.Buffer, error) {
		if t == mem.DM {
			return mem.AllocFrom(t, d, size)
		}
		return mem.Alloc(t, size)
	}
}

// newBuf allocates a buffer closed by the test's cleanup.
func newBuf(t testing.TB, typ mem.Type, size int) *mem.Buffer {
	t.Helper()
	b, err := mem.Alloc(typ, size)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}
