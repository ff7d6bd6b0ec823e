package hostcopy

import "unsafe"

//go:noescape
func stream64(dst, src unsafe.Pointer, n uintptr)

// streamChunk bounds one call into the assembly loop, which cannot be preempted.
const streamChunk = 256 << 10

func stream(dst, src []byte) {
	// Up to the first 64-byte boundary of dst, and the tail, by copy; the middle by
	// non-temporal stores, whole cache lines only.
	head := int((64 - uintptr(unsafe.Pointer(&dst[0]))%64) % 64)
	if head >= len(dst) {
		copy(dst, src)
		return
	}
	copy(dst[:head], src[:head])
	body := (len(dst) - head) &^ 63
	for off := head; off < head+body; off += streamChunk {
		m := min(streamChunk, head+body-off)
		stream64(unsafe.Pointer(&dst[off]), unsafe.Pointer(&src[off]), uintptr(m))
	}
	copy(dst[head+body:], src[head+body:])
}
