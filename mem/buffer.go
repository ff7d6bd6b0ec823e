package mem

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Buffer is one allocation of one memory type. Its methods other than Close
// are safe for concurrent use; Close must not race with copies that use it.
type Buffer struct {
	typ  Type
	addr uintptr
	size int

	mapping []byte // host: the whole mapping; sim: the PROT_NONE mapping
	alias   []byte // sim: the read-write view of the same pages
	region  Region // dm
	// closeRegion releases region: the func its Seal returned where it has one
	closeRegion func() error
	pinned      bool // host: page-locked for CUDA (Pin)

	mu     sync.Mutex
	closed atomic.Bool
	uses   int // Acquire calls not yet released: Close refuses while any is
}

// Allocator hands out regions of memory that the CPU cannot address, such as
// NIC device memory. Package dm implements it; mem depends only on this
// interface so that dm may depend on mem.
type Allocator interface {
	Alloc(size int) (Region, error)
}

// Region is a chunk of foreign memory reachable only through copies.
// Offset is its address in the owner's space (for NIC memory, the offset
// that a zero-based MR exposes); CopyTo and CopyFrom take offsets relative
// to the region.
type Region interface {
	Offset() int
	Len() int
	CopyTo(off int, src []byte) error
	CopyFrom(dst []byte, off int) error
	Close() error
}

var live atomic.Int64

// Live returns the number of Buffers allocated and not yet closed. Tests use
// it to prove that every path releases what it allocates.
func Live() int { return int(live.Load()) }

// Alloc allocates size bytes of memory of type t. DM memory comes from a pool
// through AllocFrom instead.
func Alloc(t Type, size int) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("mem: alloc %s: size must be > 0, got %d: %w", t, size, ErrInvalid)
	}
	var (
		b   *Buffer
		err error
	)
	switch t {
	case Host:
		b, err = allocHost(size)
	case Sim:
		b, err = allocSim(size)
	case CUDA, CUDAManaged:
		b, err = allocCUDA(t, size)
	case DM:
		err = fmt.Errorf("mem: alloc dm: use AllocFrom with a dm pool: %w", ErrNotSupported)
	default:
		err = fmt.Errorf("mem: alloc: unknown memory type %s: %w", t, ErrInvalid)
	}
	if err != nil {
		return nil, err
	}
	live.Add(1)
	return b, nil
}

// AllocFrom allocates size bytes of type t from a. Only DM is allocated this
// way; the Buffer's Addr is the region's Offset, and copies go through the
// Region.
func AllocFrom(t Type, a Allocator, size int) (*Buffer, error) {
	if t != DM {
		return nil, fmt.Errorf("mem: alloc %s from an allocator: only dm comes from an allocator, use Alloc: %w", t, ErrInvalid)
	}
	if a == nil {
		return nil, fmt.Errorf("mem: alloc dm: allocator is nil: %w", ErrInvalid)
	}
	if size <= 0 {
		return nil, fmt.Errorf("mem: alloc dm: size must be > 0, got %d: %w", size, ErrInvalid)
	}
	r, err := a.Alloc(size)
	if err != nil {
		return nil, fmt.Errorf("mem: alloc dm: %w", err)
	}
	if r == nil {
		return nil, fmt.Errorf("mem: alloc dm: allocator returned no region: %w", ErrInvalid)
	}
	if r.Len() < size {
		err := fmt.Errorf("mem: alloc dm: allocator returned %d bytes for %d: %w", r.Len(), size, ErrInvalid)
		return nil, errors.Join(err, r.Close())
	}
	// The Buffer owns the region: one that can be sealed then closes only through
	// Buffer.Close, which refuses while a request holds the buffer.
	closeRegion := r.Close
	if s, ok := r.(interface{ Seal() func() error }); ok {
		closeRegion = s.Seal()
	}
	live.Add(1)
	return &Buffer{typ: DM, addr: uintptr(r.Offset()), size: size, region: r, closeRegion: closeRegion}, nil
}

// Addr is the buffer's address in its own memory space: a device pointer for
// CUDA and Sim, a CPU address for Host and CUDAManaged, the region offset for
// DM. It is 0 once the buffer is closed.
func (b *Buffer) Addr() uintptr {
	if b == nil || b.closed.Load() {
		return 0
	}
	return b.addr
}

// Len is the size asked for at allocation.
func (b *Buffer) Len() int {
	if b == nil {
		return 0
	}
	return b.size
}

// Type is the buffer's memory type.
func (b *Buffer) Type() Type {
	if b == nil {
		return Host
	}
	return b.typ
}

// Region is the region behind a DM buffer, which says where the NIC finds it (a
// transport that owns the region's registration uses it in place); nil for other
// types and after Close.
func (b *Buffer) Region() Region {
	if b == nil || b.closed.Load() || b.typ != DM {
		return nil
	}
	return b.region
}

// Bytes is a CPU view of the buffer, for Host and CUDAManaged only; nil for
// other types and after Close. The slice must not be used after Close.
func (b *Buffer) Bytes() []byte {
	if b == nil || b.closed.Load() {
		return nil
	}
	switch b.typ {
	case Host:
		return b.mapping[:b.size:b.size]
	case CUDAManaged:
		return unsafe.Slice((*byte)(ptr(b.addr)), b.size)
	}
	return nil
}

// Close releases the memory. It is idempotent and safe on a nil Buffer. While an
// Acquire of the buffer is not released (a collective request that holds it as an
// argument, until the request's Close), Close refuses with ErrBusy and changes
// nothing: releasing memory that the NIC or another rank may still write would
// corrupt what is allocated there next (a DM chunk) or crash the process (host
// memory). If a DM region refuses to close (something, such as an MR, still uses
// it), the Buffer stays open so that Close can be retried; for other types the
// memory is gone even when the release reports an error, since retrying cannot help.
func (b *Buffer) Close() error {
	if b == nil {
		return nil
	}
	if b.zero() {
		return errZero("close")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return nil
	}
	if b.uses > 0 {
		return fmt.Errorf("mem: close %s buffer: acquired %d time(s) and not released (a collective request holds its buffers until its Close): %w", b.typ, b.uses, ErrBusy)
	}
	var err error
	switch b.typ {
	case Host:
		if b.pinned {
			// Unlock before unmapping: the driver would otherwise keep a
			// record of pages that no longer exist.
			err = cudaHostRegister(b.addr, 0, false)
			b.pinned = false
		}
		err = errors.Join(err, munmap(b.mapping))
	case Sim:
		err = freeSim(b)
	case CUDA, CUDAManaged:
		err = cudaFree(b.addr)
	case DM:
		if err = b.closeRegion(); err != nil {
			return fmt.Errorf("mem: close dm buffer: %w", err)
		}
	}
	// The fields keep their (now dead) values: the getters read them without the lock
	// after checking closed, so a Close racing a getter must not write them.
	b.closed.Store(true)
	live.Add(-1)
	if err != nil {
		return fmt.Errorf("mem: close %s buffer: %w", b.typ, err)
	}
	return nil
}

// zero says b was not made by Alloc or AllocFrom (every one they make has a size):
// it holds nothing to release or lend, and must not count in Live.
func (b *Buffer) zero() bool { return b.size == 0 }

func errZero(op string) error {
	return fmt.Errorf("mem: %s: a zero Buffer (only Alloc and AllocFrom make one): %w", op, ErrInvalid)
}

// ptr turns an address that is not Go memory into a pointer. Spelled this way
// because go vet flags unsafe.Pointer(uintptr) conversions, which are unsafe
// only for Go heap addresses.
func ptr(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

func bytesAt(a uintptr, n int) []byte { return unsafe.Slice((*byte)(ptr(a)), n) }

func addrOf(p []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(p))) }

// Acquire marks the buffer as in use until a matching Release: Close refuses
// (ErrBusy) meanwhile. A collective request acquires every Buffer in its arguments
// at Init and releases it at its Close, so that the memory outlives every write
// that may still land in it. Acquire fails with ErrInvalid on a nil or closed
// Buffer; a Buffer may be acquired any number of times at once. It allocates
// nothing, so that a loop of collectives on one Buffer allocates nothing for it.
func (b *Buffer) Acquire() error {
	if b == nil {
		return fmt.Errorf("mem: acquire: buffer is nil: %w", ErrInvalid)
	}
	if b.zero() {
		return errZero("acquire")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return fmt.Errorf("mem: acquire: %s buffer is closed: %w", b.typ, ErrInvalid)
	}
	b.uses++
	return nil
}

// Release ends one Acquire. A Release without an Acquire outstanding does nothing.
func (b *Buffer) Release() {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.uses > 0 {
		b.uses--
	}
	b.mu.Unlock()
}
