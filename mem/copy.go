package mem

import (
	"fmt"
	"runtime"
	"sync"
)

// TypeOf reports the memory type behind addr: Sim for any address inside an
// open sim buffer, CUDA or CUDAManaged for memory that libcuda knows as such,
// Host otherwise. DM addresses are offsets in the NIC's space, not CPU
// addresses, so TypeOf cannot recognise them.
func TypeOf(addr uintptr) Type {
	if lookupSim(addr) != nil {
		return Sim
	}
	if t, ok := cudaPointerType(addr); ok {
		return t
	}
	return Host
}

// PinnedHost reports whether addr is host memory that the CUDA driver pinned
// (Buffer.Pin, or allocated pinned): memory that a copy engine reads and writes by DMA.
// It is false without CUDA.
func PinnedHost(addr uintptr) bool {
	t, known := cudaPointerType(addr)
	return known && t == Host
}

// span is one side of a copy, resolved to where the bytes can be reached.
type span struct {
	t   Type
	p   uintptr // CPU address (host, managed, the sim alias) or device pointer (cuda)
	r   Region  // dm
	off int     // offset into r
	b   *Buffer // nil for raw pointers
}

// cpu reports whether the CPU may touch s.p directly.
func (s span) cpu() bool { return s.t == Host || s.t == Sim || s.t == CUDAManaged }

func (s span) at(d int) span {
	if s.t == DM {
		s.off += d
	} else {
		s.p += uintptr(d)
	}
	return s
}

// resolve checks a buffer range and returns the span that reaches it.
func resolve(name string, b *Buffer, off, n int) (span, error) {
	if b == nil {
		return span{}, fmt.Errorf("mem: copy: %s is nil: %w", name, ErrInvalid)
	}
	if b.closed.Load() {
		return span{}, fmt.Errorf("mem: copy: %s is closed: %w", name, ErrInvalid)
	}
	if off < 0 || off > b.size || n > b.size-off {
		return span{}, fmt.Errorf("mem: copy: %sOff %d + n %d is out of range of %s's %d bytes: %w",
			name, off, n, name, b.size, ErrInvalid)
	}
	s := span{t: b.typ, p: b.addr + uintptr(off), b: b}
	switch b.typ {
	case Sim:
		s.p = addrOf(b.alias) + uintptr(off)
	case DM:
		s.p, s.r, s.off = 0, b.region, off
	}
	return s, nil
}

// Copy copies n bytes from src at srcOff to dst at dstOff, between buffers of
// any types, and returns when the bytes are in place. Overlapping ranges of
// one buffer are copied as by memmove.
func Copy(dst *Buffer, dstOff int, src *Buffer, srcOff int, n int) error {
	d, s, err := resolvePair(dst, dstOff, src, srcOff, n)
	if err != nil || n == 0 {
		return err
	}
	return copySpans(d, s, n)
}

func resolvePair(dst *Buffer, dstOff int, src *Buffer, srcOff int, n int) (span, span, error) {
	if n < 0 {
		return span{}, span{}, fmt.Errorf("mem: copy: n must be >= 0, got %d: %w", n, ErrInvalid)
	}
	d, err := resolve("dst", dst, dstOff, n)
	if err != nil {
		return span{}, span{}, err
	}
	s, err := resolve("src", src, srcOff, n)
	if err != nil {
		return span{}, span{}, err
	}
	return d, s, nil
}

// CopyPtr copies n bytes between raw addresses whose types the caller knows,
// such as user slices or device pointers from elsewhere. The memory must stay
// valid until CopyPtr returns. Go memory must also stay in place: an address
// converted in the call itself (CopyPtr(uintptr(unsafe.Pointer(&b[0])), ...)) is
// kept on the heap and alive for the call (go:uintptrescapes), but one converted
// before is an integer that a moving stack leaves behind, so pin that memory
// (runtime.Pinner). Sim addresses must lie inside an open sim buffer. DM needs a
// Region, so it goes through Copy.
//
//go:uintptrescapes
func CopyPtr(dst uintptr, dstType Type, src uintptr, srcType Type, n int) error {
	if n < 0 {
		return fmt.Errorf("mem: copy: n must be >= 0, got %d: %w", n, ErrInvalid)
	}
	d, s, err := resolvePtrPair(dst, dstType, src, srcType, n)
	if err != nil || n == 0 {
		return err
	}
	return copySpans(d, s, n)
}

// resolvePtrPair resolves the two raw ranges of a copy of n bytes, dst first.
func resolvePtrPair(dst uintptr, dstType Type, src uintptr, srcType Type, n int) (span, span, error) {
	d, err := resolvePtr("dst", dst, dstType, n)
	if err != nil {
		return span{}, span{}, err
	}
	s, err := resolvePtr("src", src, srcType, n)
	return d, s, err
}

func resolvePtr(name string, p uintptr, t Type, n int) (span, error) {
	switch t {
	case Host, CUDA, CUDAManaged:
		if p == 0 && n > 0 {
			return span{}, fmt.Errorf("mem: copy: %s is a null %s pointer: %w", name, t, ErrInvalid)
		}
		return span{t: t, p: p}, nil
	case Sim:
		b := lookupSim(p)
		if b == nil {
			return span{}, fmt.Errorf("mem: copy: %s %#x is not in any open sim buffer: %w", name, p, ErrInvalid)
		}
		return resolve(name, b, int(p-b.addr), n)
	case DM:
		return span{}, fmt.Errorf("mem: copy: %s: dm memory is reached through its Buffer, use Copy: %w", name, ErrNotSupported)
	}
	return span{}, fmt.Errorf("mem: copy: %s: unknown memory type %s: %w", name, t, ErrInvalid)
}

// overlap reports whether the two ranges share bytes, and whether dst lies
// above src, in which case a chunked copy must run from the end.
func overlap(d, s span, n int) (any, backward bool) {
	var da, sa uintptr
	switch {
	case d.t == DM && s.t == DM:
		if d.b == nil || d.b != s.b {
			return false, false
		}
		da, sa = uintptr(d.off), uintptr(s.off)
	case d.t == DM || s.t == DM:
		return false, false
	default:
		da, sa = d.p, s.p
	}
	un := uintptr(n)
	if da < sa+un && sa < da+un {
		return true, da > sa
	}
	return false, false
}

func copySpans(d, s span, n int) error {
	ov, backward := overlap(d, s, n)
	switch {
	case d.t == DM && s.cpu():
		return wrapRegion(d.r.CopyTo(d.off, bytesAt(s.p, n)))
	case s.t == DM && d.cpu():
		return wrapRegion(s.r.CopyFrom(bytesAt(d.p, n), s.off))
	case d.t == DM || s.t == DM:
		return stage(d, s, n, backward)
	case isCUDA(d.t) || isCUDA(s.t):
		if ov {
			// cuMemcpy leaves overlapping copies undefined.
			return stage(d, s, n, backward)
		}
		return cudaMemcpy(d.p, s.p, n, !isCUDA(s.t), !isCUDA(d.t))
	}
	copy(bytesAt(d.p, n), bytesAt(s.p, n))
	return nil
}

func wrapRegion(err error) error {
	if err != nil {
		return fmt.Errorf("mem: copy: dm region: %w", err)
	}
	return nil
}

// stage carries a copy that no single call can make through a host bounce
// chunk, front to back, or back to front when dst overlaps src from above.
func stage(d, s span, n int, backward bool) error {
	buf, err := getBounce()
	if err != nil {
		return err
	}
	defer putBounce(buf)
	for done := 0; done < n; {
		c := min(len(buf), n-done)
		at := done
		if backward {
			at = n - done - c
		}
		chunk := buf[:c]
		if err := readSpan(chunk, s.at(at)); err != nil {
			return err
		}
		if err := writeSpan(d.at(at), chunk); err != nil {
			return err
		}
		done += c
	}
	return nil
}

func readSpan(p []byte, s span) error {
	switch {
	case s.t == DM:
		return wrapRegion(s.r.CopyFrom(p, s.off))
	case isCUDA(s.t):
		// p's address as an integer keeps nothing alive, and the caller may hold p
		// no longer.
		err := cudaMemcpy(addrOf(p), s.p, len(p), false, true)
		runtime.KeepAlive(p)
		return err
	}
	copy(p, bytesAt(s.p, len(p)))
	return nil
}

func writeSpan(d span, p []byte) error {
	switch {
	case d.t == DM:
		return wrapRegion(d.r.CopyTo(d.off, p))
	case isCUDA(d.t):
		err := cudaMemcpy(d.p, addrOf(p), len(p), true, false)
		runtime.KeepAlive(p)
		return err
	}
	copy(bytesAt(d.p, len(p)), p)
	return nil
}

// Bounce chunks are mapped, not taken from the Go heap, because they are
// passed to libcuda and to regions' copy routines. Up to bounceKeep are kept
// for reuse, so steady-state copies map nothing; more are mapped on demand
// when many copies stage at once, and unmapped when they come back.
const (
	bounceSize = 1 << 20
	bounceKeep = 8
)

var bounce struct {
	sync.Mutex
	free [][]byte
}

func getBounce() ([]byte, error) {
	bounce.Lock()
	if n := len(bounce.free); n > 0 {
		b := bounce.free[n-1]
		bounce.free = bounce.free[:n-1]
		bounce.Unlock()
		return b, nil
	}
	bounce.Unlock()
	b, err := mmapHost(bounceSize)
	if err != nil {
		return nil, fmt.Errorf("mem: copy: bounce buffer: %w", err)
	}
	return b, nil
}

func putBounce(b []byte) {
	bounce.Lock()
	if len(bounce.free) < bounceKeep {
		bounce.free = append(bounce.free, b)
		b = nil
	}
	bounce.Unlock()
	_ = munmap(b)
}
