package mem_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/mem"
)

func TestAllocClose(t *testing.T) {
	for _, typ := range []mem.Type{mem.Host, mem.Sim} {
		for _, size := range []int{1, 3, 4095, 4096, 4097, 1<<20 + 7} {
			t.Run(typ.String(), func(t *testing.T) {
				before := mem.Live()
				b, err := mem.Alloc(typ, size)
				require.NoError(t, err)
				require.Equal(t, before+1, mem.Live())
				require.Equal(t, typ, b.Type())
				require.Equal(t, size, b.Len())
				require.NotZero(t, b.Addr())
				require.Zero(t, b.Addr()%4096, "page aligned")
				if typ == mem.Host {
					require.Len(t, b.Bytes(), size)
					b.Bytes()[size-1] = 0xa5 // writable to the last byte
				} else {
					require.Nil(t, b.Bytes(), "the CPU has no view of sim memory")
				}
				require.NoError(t, b.Close())
				require.NoError(t, b.Close(), "second Close")
				require.Equal(t, before, mem.Live())
				require.Zero(t, b.Addr())
				require.Nil(t, b.Bytes())
			})
		}
	}
}

func TestAllocBadArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  mem.Type
		size int
		is   error
		msg  string
	}{
		{"host zero", mem.Host, 0, mem.ErrInvalid, "size must be > 0"},
		{"host negative", mem.Host, -1, mem.ErrInvalid, "size must be > 0, got -1"},
		{"sim zero", mem.Sim, 0, mem.ErrInvalid, "size must be > 0"},
		{"cuda zero", mem.CUDA, 0, mem.ErrInvalid, "size must be > 0"},
		{"dm", mem.DM, 64, mem.ErrNotSupported, "use AllocFrom with a dm pool"},
		{"unknown type", mem.Type(9), 64, mem.ErrInvalid, "Type(9)"},
		{"host huge", mem.Host, 1 << 62, unix.ENOMEM, "mmap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := mem.Live()
			b, err := mem.Alloc(tc.typ, tc.size)
			require.Nil(t, b)
			require.ErrorIs(t, err, tc.is)
			require.ErrorContains(t, err, tc.msg)
			require.Equal(t, before, mem.Live())
		})
	}
}

func TestAllocFrom(t *testing.T) {
	e := newEnv(t)
	b, err := mem.AllocFrom(mem.DM, e.dm, 100)
	require.NoError(t, err)
	require.Equal(t, mem.DM, b.Type())
	require.Equal(t, 100, b.Len())
	require.Nil(t, b.Bytes())
	b2, err := mem.AllocFrom(mem.DM, e.dm, 8)
	require.NoError(t, err)
	require.Equal(t, uintptr(128), b2.Addr(), "Addr is the region offset")
	require.NotNil(t, b2.Region(), "a DM buffer exposes its region, for a transport that owns its registration")
	require.Equal(t, 128, b2.Region().Offset())
	require.NoError(t, b2.Close())
	require.Nil(t, b2.Region(), "no region after Close")
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())

	h, err := mem.Alloc(mem.Host, 8)
	require.NoError(t, err)
	require.Nil(t, h.Region(), "host memory has no region")
	require.NoError(t, h.Close())
	_, err = mem.AllocFrom(mem.Host, e.dm, 8)
	require.ErrorIs(t, err, mem.ErrInvalid)
	_, err = mem.AllocFrom(mem.DM, nil, 8)
	require.ErrorIs(t, err, mem.ErrInvalid)
	require.ErrorContains(t, err, "allocator is nil")
	_, err = mem.AllocFrom(mem.DM, e.dm, 0)
	require.ErrorContains(t, err, "size must be > 0")
	_, err = mem.AllocFrom(mem.DM, e.dm, 1<<30)
	require.ErrorIs(t, err, unix.ENOMEM, "the allocator's error is wrapped")
}

// A region that refuses to close (an MR still on it) leaves the Buffer open,
// so that Close can be retried once the MR is gone.
func TestCloseDMBusy(t *testing.T) {
	e := newEnv(t)
	before := mem.Live()
	b, err := mem.AllocFrom(mem.DM, e.dm, 64)
	require.NoError(t, err)
	r := e.dm.lastRegion()
	r.busy = true
	err = b.Close()
	require.ErrorIs(t, err, unix.EBUSY)
	require.Equal(t, before+1, mem.Live())
	require.Equal(t, uintptr(r.Offset()), b.Addr(), "still open")
	r.busy = false
	require.NoError(t, b.Close())
	require.Equal(t, before, mem.Live())
}

func TestNilBuffer(t *testing.T) {
	var b *mem.Buffer
	require.NoError(t, b.Close())
	require.Zero(t, b.Addr())
	require.Zero(t, b.Len())
	require.Nil(t, b.Bytes())
}

func TestCUDAAbsent(t *testing.T) {
	if mem.CUDAAvailable() {
		t.Skip("CUDA is present")
	}
	for _, typ := range []mem.Type{mem.CUDA, mem.CUDAManaged} {
		b, err := mem.Alloc(typ, 4096)
		require.Nil(t, b)
		require.ErrorIs(t, err, mem.ErrNotSupported)
		t.Logf("%s: %v", typ, err)
	}
	h := newEnv(t).alloc(mem.Host, 64)
	err := mem.CopyPtr(0x1000, mem.CUDA, h.Addr(), mem.Host, 64)
	require.ErrorIs(t, err, mem.ErrNotSupported)
	require.Equal(t, mem.Host, mem.TypeOf(h.Addr()))
	var cerr *mem.CUDAError
	require.False(t, errors.As(err, &cerr), "no driver call was made")
}

// shortAllocator hands out regions a byte shorter than asked for, as a faulty pool
// might.
type shortAllocator struct{ f *fakeDM }

func (s shortAllocator) Alloc(size int) (mem.Region, error) { return s.f.Alloc(size - 1) }

// TestAllocFromShortRegion: a region shorter than the size asked for is refused and
// closed: a Buffer over it would take copies past the region's end, and the region
// would be lost.
func TestAllocFromShortRegion(t *testing.T) {
	e := newEnv(t)
	before := mem.Live()
	b, err := mem.AllocFrom(mem.DM, shortAllocator{e.dm}, 64)
	require.Nil(t, b)
	require.ErrorIs(t, err, mem.ErrInvalid)
	require.ErrorContains(t, err, "allocator returned 63 bytes for 64")
	require.True(t, e.dm.lastRegion().closed, "the short region was given back")
	require.Equal(t, before, mem.Live())
}
