// Package hostcopy copies between host buffers in the way that is fastest for the
// buffers a collective reuses: in pieces that stay in the cache's path, where one
// copy() would take Go's non-temporal path.
//
// Go's runtime memmove (amd64) switches to non-temporal stores at 1 MiB: the
// destination bypasses the caches, which pays off for copies larger than the caches,
// and costs where the buffers fit and are read again soon, as a collective's are.
// Measured on the project's 2-core machine (docs/design.md, "Host copies in pieces"): 1 MiB in
// one copy 26.6-26.9 µs, in 512 KiB pieces 22.2-22.4 µs; at 12 MiB one copy wins.
//
// Stream is the opposite choice, for a destination that a device reads next by DMA
// (pinned staging scratch, which the CUDA copy engine reads): non-temporal stores at
// every size, so that no line of it is left dirty in a CPU cache for the DMA to snoop.
package hostcopy

// piece is below memmove's non-temporal threshold; maxPieced is the largest copy
// that is split, from the measurement above.
const (
	piece     = 512 << 10
	maxPieced = 4 << 20
)

// Copy copies min(len(dst), len(src)) bytes of src into dst and returns the count.
// The ranges must not overlap.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n <= piece || n > maxPieced {
		return copy(dst, src)
	}
	for off := 0; off < n; off += piece {
		end := min(off+piece, n)
		copy(dst[off:end], src[off:end])
	}
	return n
}

// Stream copies min(len(dst), len(src)) bytes of src into dst with non-temporal stores
// (amd64; copy elsewhere) and returns the count. The stores are fenced before it
// returns. The ranges must not overlap.
func Stream(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < streamMin {
		return copy(dst, src)
	}
	stream(dst[:n], src[:n])
	return n
}

// streamMin: below a few cache lines, the fence costs more than the lines.
const streamMin = 1 << 10
