package coll_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// memCase is the memory of a rooted collective's buffers on every rank: src and dst
// types (a non-root uses one of them).
type memCase struct{ src, dst mem.Type }

func (m memCase) String() string { return m.src.String() + "-" + m.dst.String() }

// persistentTyped makes one persistent linear gather or scatter per rank with buffers
// of m's types (DM from each rank's own context) filled with seeded random bytes. The
// returned function closes the requests and frees the buffers.
func persistentTyped(tb testing.TB, rnd *rand.Rand, w *world, typ coll.CollType, blk int, m memCase) ([]*coll.Request, func() error) {
	tb.Helper()
	n := w.n
	reqs := make([]*coll.Request, n)
	var bufs []*mem.Buffer
	release := func() error {
		var errs []error
		for _, q := range reqs {
			errs = append(errs, q.Close())
		}
		for _, b := range bufs {
			errs = append(errs, b.Close())
		}
		return errors.Join(errs...)
	}
	alloc := func(r *rank, t mem.Type, size int) *mem.Buffer {
		var b *mem.Buffer
		var err error
		if t == mem.DM {
			b, err = r.ctx.AllocDM(size)
		} else {
			b, err = mem.Alloc(t, size)
		}
		require.NoError(tb, err, "%d bytes of %v", size, t)
		bufs = append(bufs, b)
		data := make([]byte, size)
		testutil.Fill(rnd, data)
		host, err := mem.Alloc(mem.Host, size)
		require.NoError(tb, err)
		copy(host.Bytes(), data)
		require.NoError(tb, mem.Copy(b, 0, host, 0, size))
		require.NoError(tb, host.Close())
		return b
	}
	args := make([]coll.Args, n)
	for _, r := range w.ranks {
		a := coll.Args{Type: typ, Root: 0, DType: coll.Uint8, Flags: coll.Persistent, Alg: "linear"}
		small, big := blk, n*blk
		if typ == coll.Scatter {
			small, big = big, small
		}
		// gather: src blk, root's dst n×blk; scatter: root's src n×blk, dst blk.
		if typ == coll.Gather || r.r == 0 {
			a.Src = coll.BufferDesc{Buf: alloc(r, m.src, small), Count: small}
		}
		if typ == coll.Scatter || r.r == 0 {
			a.Dst = coll.BufferDesc{Buf: alloc(r, m.dst, big), Count: big}
		}
		args[r.r] = a
	}
	w.mustRun(func(r *rank) error {
		q, err := r.team.Init(args[r.r])
		reqs[r.r] = q
		return err
	})
	return reqs, release
}

// postTimed is postAll that returns the root's (rank 0's) time of every Post+Wait:
// the collective keeps the ranks in step, so the root's time is the collective's.
func postTimed(tb testing.TB, reqs []*coll.Request, iters int) []time.Duration {
	out := make([]time.Duration, iters)
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	for i, q := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range iters {
				start := time.Now()
				if errs[i] = q.Post(); errs[i] != nil {
					return
				}
				if errs[i] = q.Wait(context.Background()); errs[i] != nil {
					return
				}
				if i == 0 {
					out[it] = time.Since(start)
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(tb, err, "rank %d", i)
	}
	return out
}

// median is the middle of ds: the machine is shared, and a median shrugs off the
// posts that another process preempted.
func median(ds []time.Duration) time.Duration { return quantile(ds, 0.5) }

// quantile is the q-th quantile of ds (0 ≤ q < 1), the element at q·len(ds).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)))]
}

// BenchmarkDMSideBySide times persistent linear gathers and scatters on 4 goroutine
// ranks with host buffers, DM buffers (used in place through each context's pool), and
// host src with DM dst (unstaged too: tlmlx5 takes mixed types, Reach.Mixed), side by
// side in one run: two rounds of b.N posts per configuration, each round holding the
// three configurations' requests at once and alternating them in 25 blocks. dm/host and
// host-dm/host are the ratios of the median post times to host-host's, the -p10 metrics
// the same at the tenth percentile. Sizes are per block and fit each rank's 64 KiB of
// the device's memory (soft0's 256 KiB over 4 contexts) with every configuration's
// buffers allocated at once.
func BenchmarkDMSideBySide(b *testing.B) {
	const n = 4
	w := newWorld(b, n, coll.Config{Device: device(), DMCapacity: 64 << 10})
	if probe, err := w.ranks[0].ctx.AllocDM(64); err != nil {
		b.Skipf("%s gives no device memory: %v", device(), err)
	} else {
		require.NoError(b, probe.Close())
	}
	rnd := testutil.Rand(b)
	cases := []memCase{{mem.Host, mem.Host}, {mem.DM, mem.DM}, {mem.Host, mem.DM}}
	for _, typ := range []coll.CollType{coll.Gather, coll.Scatter} {
		for _, blk := range []int{256, 1 << 10, 4 << 10} {
			b.Run(fmt.Sprintf("%v/%d", typ, blk), func(b *testing.B) {
				// Two rounds of b.N posts per configuration. A round makes every
				// configuration's requests at once and alternates them in short blocks,
				// so that a burst of load from elsewhere on the machine falls on all of
				// them alike.
				const blocks = 25
				times := make([][]time.Duration, len(cases))
				for round := 0; round < 2; round++ {
					reqs := make([][]*coll.Request, len(cases))
					var releases []func() error
					for i, m := range cases {
						var release func() error
						reqs[i], release = persistentTyped(b, rnd, w, typ, blk, m)
						releases = append(releases, release)
						postAll(b, reqs[i], 10) // warm up
					}
					for blkNo := 0; blkNo < blocks; blkNo++ {
						for i := range cases {
							times[i] = append(times[i], postTimed(b, reqs[i], max(1, b.N/blocks))...)
						}
					}
					for _, release := range releases {
						require.NoError(b, release())
					}
				}
				host := median(times[0])
				b.ReportMetric(float64(host.Nanoseconds())/1e3, "µs/host-host")
				b.ReportMetric(float64(median(times[1]))/float64(host), "dm/host")
				b.ReportMetric(float64(median(times[2]))/float64(host), "host-dm/host")
				// The tenth percentile: posts that no other goroutine's scheduling
				// stretched, so the fixed costs of each path show.
				host10 := quantile(times[0], 0.1)
				b.ReportMetric(float64(host10.Nanoseconds())/1e3, "µs/host-host-p10")
				b.ReportMetric(float64(quantile(times[1], 0.1))/float64(host10), "dm/host-p10")
				b.ReportMetric(float64(quantile(times[2], 0.1))/float64(host10), "host-dm/host-p10")
			})
		}
	}
}
