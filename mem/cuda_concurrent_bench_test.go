package mem_test

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// BenchmarkCUDACopyConcurrent: k goroutines (ranks of one process sharing a GPU, as
// ibcoll-perf -np runs them) each copy between CUDA memory and pinned host scratch at
// once, with Copy (synchronous) and with a Stream of their own (CopyAsync, then
// Synchronize), each waiting for the GPU through the stream's completion flag ("flag",
// the default) or as before (cuMemcpy, polled events: "event"). The two waits run in
// two alternated rounds; µs/copy is the median time of one goroutine's copy and
// round-µs the wall time of a round of k copies.
func BenchmarkCUDACopyConcurrent(b *testing.B) {
	requireCUDA(b)
	defer mem.SetCUDAWaitFlag(true)
	for _, k := range []int{1, 8} {
		for _, size := range []int{64 << 10, 256 << 10, 1 << 20} {
			for _, dir := range []string{"H2D", "D2H"} {
				for _, mode := range []string{"sync", "stream"} {
					var res [2][2][2]float64 // [flag][round]{median, round}
					for round := range 2 {
						for i := range 2 {
							flag := (i+round)%2 == 0
							mem.SetCUDAWaitFlag(flag)
							f := 0
							if flag {
								f = 1
							}
							res[f][round][0], res[f][round][1] = benchConcurrentCopy(b, k, size, dir == "H2D", mode == "stream")
						}
					}
					for f, name := range []string{"event", "flag"} {
						b.Run(fmt.Sprintf("k%d/%s/%dK/%s/%s", k, dir, size>>10, mode, name), func(b *testing.B) {
							b.ReportMetric(res[f][0][0], "µs/copy-r1")
							b.ReportMetric(res[f][1][0], "µs/copy-r2")
							b.ReportMetric(res[f][0][1], "round-µs-r1")
							b.ReportMetric(res[f][1][1], "round-µs-r2")
						})
					}
				}
			}
		}
	}
}

func benchConcurrentCopy(b *testing.B, k, size int, h2d, stream bool) (median, round float64) {
	const iters = 200
	type pair struct{ dst, src *mem.Buffer }
	pairs := make([]pair, k)
	for i := range pairs {
		h := benchAllocNow(b, mem.Host, size)
		require.NoError(b, h.Pin())
		d := benchAllocNow(b, mem.CUDA, size)
		pairs[i] = pair{d, h}
		if !h2d {
			pairs[i] = pair{h, d}
		}
	}
	times := make([][]time.Duration, k)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range k {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := pairs[i]
			var s *mem.Stream
			if stream {
				s, _ = mem.NewStream()
				defer s.Close()
			}
			for it := range iters + 10 {
				start := time.Now()
				var err error
				if stream {
					if err = mem.CopyAsync(s, p.dst, 0, p.src, 0, size); err == nil {
						err = s.Synchronize()
					}
				} else {
					err = mem.Copy(p.dst, 0, p.src, 0, size)
				}
				if err != nil {
					b.Error(err)
					return
				}
				if it >= 10 {
					times[i] = append(times[i], time.Since(start))
				}
			}
		}(i)
	}
	wg.Wait()
	wall := time.Since(start)
	var all []time.Duration
	for _, t := range times {
		all = append(all, t...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) == 0 {
		return 0, 0
	}
	return float64(all[len(all)/2].Nanoseconds()) / 1e3, float64(wall.Nanoseconds()) / 1e3 / (iters + 10)
}

// benchAllocNow allocates a buffer that is freed when the function's caller returns to
// the benchmark (the rounds allocate afresh).
func benchAllocNow(b *testing.B, typ mem.Type, n int) *mem.Buffer { return benchAlloc(b, typ, n) }
