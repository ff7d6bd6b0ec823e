package reduce

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/collective"
)

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}, {"16MiB", 16 << 20}}

// benchData fills a vector whose values stay finite and normal however many times
// the benchmark folds it in (a subnormal or an infinity would time a slow path):
// small integers for sums, ±1 for products.
func benchData(rng *rand.Rand, b []byte, dt collective.DType, op collective.Op) {
	sz := dt.Size()
	for off := 0; off < len(b); off += sz {
		x := rng.IntN(5) - 2
		if op == collective.OpProd {
			x = 1 - 2*rng.IntN(2)
		}
		var v uint64
		switch dt {
		case collective.Float16:
			v = uint64(F32ToF16(float32(x)))
		case collective.BFloat16:
			v = uint64(F32ToBF16(float32(x)))
		default:
			v = smallValue(rng, dt)
			if op == collective.OpProd {
				v = smallValueOf(dt, x)
			}
		}
		for i := 0; i < sz; i++ {
			b[off+i] = byte(v >> (8 * i))
		}
	}
}

func smallValueOf(dt collective.DType, x int) uint64 {
	switch dt {
	case collective.Float32:
		return uint64(math.Float32bits(float32(x)))
	case collective.Float64:
		return math.Float64bits(float64(x))
	}
	return uint64(x)
}

// benchBufs makes the two vectors of a benchmark once (b.Run calls its function
// several times): random elements, the first 64 KiB repeated.
func benchBufs(dt collective.DType, op collective.Op, n int) (dst, src []byte) {
	rng := rand.New(rand.NewPCG(uint64(dt)<<8|uint64(op), uint64(n)))
	dst, src = make([]byte, n), make([]byte, n)
	for _, buf := range [][]byte{dst, src} {
		benchData(rng, buf[:min(n, 64<<10)], dt, op)
		for off := 64 << 10; off < n; off += 64 << 10 {
			copy(buf[off:], buf[:64<<10])
		}
	}
	return dst, src
}

// BenchmarkReduce times Into(dst, src) for every dtype, the operators of the targets and
// four sizes. vs-copy is its bandwidth over copy()'s on the same buffers, measured in
// the same run: 1 means the reduction runs as fast as copying the vector.
func BenchmarkReduce(b *testing.B) {
	for _, dt := range collective.DTypes() {
		for _, op := range []collective.Op{collective.OpSum, collective.OpMin, collective.OpMax} {
			for _, sz := range benchSizes {
				dst, src := benchBufs(dt, op, sz.n)
				b.Run(fmt.Sprintf("%v/%v/%s", dt, op, sz.name), func(b *testing.B) {
					benchInto(b, level, dt, op, dst, src)
				})
			}
		}
	}
}

// benchInto times b.N reductions in batches of about 1 MiB, and after each batch as
// many copies of the same size between the same buffers. vs-copy is the fastest copy
// batch over the fastest reduction batch (per operation): the two are measured side
// by side, and the minimum drops what other processes on a shared machine steal from
// either. Both are timed with time.Now and the benchmark's timer never stops: testing.B's
// StopTimer and StartTimer read the runtime's memory statistics, which stops the
// world, before every batch of either kind. ns/op and MB/s are the reduction batches'
// alone, reported here.
func benchInto(b *testing.B, lvl int, dt collective.DType, op collective.Op, dst, src []byte) {
	n := len(dst)
	srcs := [][]byte{dst, src}
	batch := max(1, (1<<20)/n)
	bestRed, bestCopy := math.Inf(1), math.Inf(1)
	var redTotal time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; {
		m := min(batch, b.N-done)
		t0 := time.Now()
		for i := 0; i < m; i++ {
			if !native(lvl, dst, srcs, dt, op) {
				refInto(dst, srcs, dt, op)
			}
		}
		d := time.Since(t0)
		redTotal += d
		bestRed = min(bestRed, float64(d)/float64(m))
		t0 = time.Now()
		for i := 0; i < m; i++ {
			copy(dst, src)
		}
		bestCopy = min(bestCopy, float64(time.Since(t0))/float64(m))
		done += m
	}
	b.ReportMetric(float64(redTotal.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(n)*float64(b.N)/redTotal.Seconds()/1e6, "MB/s")
	b.ReportMetric(bestCopy/bestRed, "vs-copy")
}

// BenchmarkKernels compares the levels (go is the reference loop) on the sizes that
// decide minNative and on the targets' sizes.
func BenchmarkKernels(b *testing.B) {
	for _, lvl := range levels() {
		for _, dt := range []collective.DType{collective.Int8, collective.BFloat16, collective.Float16, collective.Float32, collective.Float64} {
			for _, sz := range []struct {
				name string
				n    int
			}{{"64B", 64}, {"256B", 256}, {"1KiB", 1 << 10}, {"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}} {
				dst, src := benchBufs(dt, collective.OpSum, sz.n)
				b.Run(fmt.Sprintf("%s/%v/sum/%s", levelNames[lvl], dt, sz.name), func(b *testing.B) {
					benchInto(b, lvl, dt, collective.OpSum, dst, src)
				})
			}
		}
	}
}
