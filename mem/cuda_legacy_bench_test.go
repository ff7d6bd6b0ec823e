package mem_test

import (
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// BenchmarkCUDALegacyAfterThreadStreams asks whether 4 MiB copies, which Copy queues
// on the legacy stream, slow down once many OS threads own a stream of their own
// (made at a thread's first synchronous copy of up to 1 MiB, and kept): the driver
// documents that an operation on the legacy stream waits on every blocking stream of
// the context, and every blocking stream then on it. Session 18 saw a staged 8-rank
// 4 MiB scatter from CUDA memory take 2070 µs after a row of 512 KiB copy-in chunks
// and 1500 µs without one. It reports the median µs of a 4 MiB device-to-host copy
// into pinned memory before any thread stream was made by this benchmark, then after
// 8 and after 64 more threads made theirs. Thread streams live as long as the process:
// run it alone (-test.bench 'LegacyAfterThreadStreams$' -test.run '^$'), so that
// nothing before it made any.
func BenchmarkCUDALegacyAfterThreadStreams(b *testing.B) {
	requireCUDA(b)
	const big = 4 << 20
	h := benchAllocNow(b, mem.Host, big)
	require.NoError(b, h.Pin())
	d := benchAllocNow(b, mem.CUDA, big)
	small := benchAllocNow(b, mem.Host, 64<<10)
	require.NoError(b, small.Pin())
	smallDev := benchAllocNow(b, mem.CUDA, 64<<10)
	median := func() float64 {
		const iters = 100
		times := make([]time.Duration, iters)
		for i := range times {
			t0 := time.Now()
			require.NoError(b, mem.Copy(h, 0, d, 0, big))
			times[i] = time.Since(t0)
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		return float64(times[iters/2].Microseconds())
	}
	// makeStreams has n goroutines, each locked to an OS thread of its own while all
	// of them run, make a synchronous small copy: each such thread makes its stream.
	// The goroutines exit locked, so their threads end and are not reused.
	makeStreams := func(n int) {
		var made, release sync.WaitGroup
		made.Add(n)
		release.Add(1)
		for range n {
			go func() {
				runtime.LockOSThread()
				require.NoError(b, mem.Copy(smallDev, 0, small, 0, 64<<10))
				made.Done()
				release.Wait()
			}()
		}
		made.Wait()
		release.Done()
	}
	before := median()
	makeStreams(8)
	after8 := median()
	makeStreams(56)
	after64 := median()
	b.Run("4M-D2H", func(b *testing.B) {
		b.ReportMetric(before, "µs-before")
		b.ReportMetric(after8, "µs-after-8-threads")
		b.ReportMetric(after64, "µs-after-64-threads")
	})
}
