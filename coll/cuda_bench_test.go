package coll_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// stagedCase is one configuration of BenchmarkStagedSideBySide: every rank's src and
// dst memory types, as ibcoll-perf's -m gives them.
type stagedCase struct{ src, dst mem.Type }

func (c stagedCase) String() string { return c.src.String() + "-" + c.dst.String() }

// stagedBufs are one rank's buffers of a rooted collective.
type stagedBufs struct {
	src, dst *mem.Buffer
	args     coll.Args
}

func newStagedBufs(tb testing.TB, typ coll.CollType, c stagedCase, r, n, blk int, flags coll.Flags) *stagedBufs {
	tb.Helper()
	srcN, dstN := blk, n*blk
	if typ == coll.Scatter {
		srcN, dstN = n*blk, blk
	}
	if r != 0 {
		if typ == coll.Gather {
			dstN = 0
		} else {
			srcN = 0
		}
	}
	b := &stagedBufs{args: coll.Args{Type: typ, Root: 0, DType: coll.Uint8, Flags: flags}}
	var err error
	if srcN > 0 {
		b.src, err = mem.Alloc(c.src, srcN)
		require.NoError(tb, err)
		b.args.Src = coll.BufferDesc{Buf: b.src, Count: srcN}
	}
	if dstN > 0 {
		b.dst, err = mem.Alloc(c.dst, dstN)
		require.NoError(tb, err)
		b.args.Dst = coll.BufferDesc{Buf: b.dst, Count: dstN}
	}
	return b
}

func (b *stagedBufs) close(tb testing.TB) {
	for _, m := range []*mem.Buffer{b.src, b.dst} {
		if m != nil {
			require.NoError(tb, m.Close())
		}
	}
}

// checkStaged runs one collective with fresh random data and checks what the root (gather)
// or every rank (scatter) received.
func checkStaged(tb testing.TB, w *world, typ coll.CollType, bufs []*stagedBufs, blk int) {
	tb.Helper()
	n := w.n
	rnd := testutil.Rand(tb)
	want := make([][]byte, n)
	for r := range n {
		want[r] = make([]byte, blk)
		testutil.Fill(rnd, want[r])
		if typ == coll.Gather {
			putHost(tb, bufs[r].src, 0, want[r])
		} else {
			putHost(tb, bufs[0].src, r*blk, want[r])
		}
	}
	w.mustRun(func(rk *rank) error {
		return runColl(context.Background(), rk.team, bufs[rk.r].args)
	})
	got := make([]byte, blk)
	for r := range n {
		if typ == coll.Gather {
			getHost(tb, got, bufs[0].dst, r*blk)
		} else {
			getHost(tb, got, bufs[r].dst, 0)
		}
		require.True(tb, bytes.Equal(want[r], got), "%v block %d", typ, r)
	}
}

// putHost copies p into b at off, whatever b's memory type.
func putHost(tb testing.TB, b *mem.Buffer, off int, p []byte) {
	tb.Helper()
	h, err := mem.Alloc(mem.Host, len(p))
	require.NoError(tb, err)
	defer func() { require.NoError(tb, h.Close()) }()
	copy(h.Bytes(), p)
	require.NoError(tb, mem.Copy(b, off, h, 0, len(p)))
}

// getHost copies len(p) bytes of b at off into p.
func getHost(tb testing.TB, p []byte, b *mem.Buffer, off int) {
	tb.Helper()
	h, err := mem.Alloc(mem.Host, len(p))
	require.NoError(tb, err)
	defer func() { require.NoError(tb, h.Close()) }()
	require.NoError(tb, mem.Copy(h, 0, b, off, len(p)))
	copy(p, h.Bytes())
}

// timeStaged runs iters collectives on every rank (non-persistent: Init, Post, Wait and
// Close each time, as ibcoll-perf does without -p; persistent: Post and Wait) and
// returns the median time of the root's iterations.
func timeStaged(tb testing.TB, w *world, bufs []*stagedBufs, iters int) time.Duration {
	tb.Helper()
	times := make([]time.Duration, iters)
	persistent := bufs[0].args.Flags&coll.Persistent != 0
	var reqs []*coll.Request
	if persistent {
		reqs = make([]*coll.Request, w.n)
		w.mustRun(func(rk *rank) error {
			q, err := rk.team.Init(bufs[rk.r].args)
			reqs[rk.r] = q
			return err
		})
		defer func() {
			for _, q := range reqs {
				require.NoError(tb, q.Close())
			}
		}()
	}
	var mu sync.Mutex
	w.mustRun(func(rk *rank) error {
		for it := range iters {
			start := time.Now()
			var err error
			if persistent {
				if err = reqs[rk.r].Post(); err == nil {
					err = reqs[rk.r].Wait(context.Background())
				}
			} else {
				err = runColl(context.Background(), rk.team, bufs[rk.r].args)
			}
			if err != nil {
				return err
			}
			if rk.r == 0 {
				mu.Lock()
				times[it] = time.Since(start)
				mu.Unlock()
			}
		}
		return nil
	})
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	return times[iters/2]
}

// BenchmarkStagedSideBySide times 8-rank gathers and scatters whose buffers are CUDA
// memory on every rank (staged through pinned host scratch, or registered directly by
// soft0's GPUDirect stand-in with IBCOLL_SOFT_GPUDIRECT=1) next to host,host in the
// same run: two rounds, the configurations alternated, median of the root's iterations;
// vs-host is a configuration's median over host,host's of the same round. Every
// configuration is data-checked once first. It needs CUDA (IBCOLL_REQUIRE=cuda turns a
// missing GPU into a failure).
//
//	coll.test -test.run XXX -test.bench StagedSideBySide -test.benchtime 1x
func BenchmarkStagedSideBySide(b *testing.B) {
	testutil.RequireCUDA(b, mem.CUDAAvailable(), "no CUDA device")
	const n, iters = 8, 60
	cases := []stagedCase{{mem.Host, mem.Host}, {mem.Host, mem.CUDA}, {mem.CUDA, mem.Host}, {mem.CUDA, mem.CUDA}}
	w := newWorld(b, n, coll.Config{Device: device(), SoftGPUDirect: os.Getenv("IBCOLL_SOFT_GPUDIRECT") == "1"})
	for _, persistent := range []bool{false, true} {
		var flags coll.Flags
		name := "init"
		if persistent {
			flags, name = coll.Persistent, "persistent"
		}
		b.Run(name, func(b *testing.B) {
			for _, typ := range []coll.CollType{coll.Gather, coll.Scatter} {
				b.Run(typ.String(), func(b *testing.B) {
					for _, blk := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20} {
						b.Run(fmt.Sprintf("%dK", blk>>10), func(b *testing.B) {
							stagedRound(b, w, typ, cases, blk, flags, iters)
						})
					}
				})
			}
		})
	}
}

// stagedRound times every case of one collective and size, two alternated rounds, and
// reports each as a sub-benchmark.
func stagedRound(b *testing.B, w *world, typ coll.CollType, cases []stagedCase, blk int, flags coll.Flags, iters int) {
	n := w.n
	all := make([][]*stagedBufs, len(cases))
	for ci, c := range cases {
		all[ci] = make([]*stagedBufs, n)
		for r := range n {
			all[ci][r] = newStagedBufs(b, typ, c, r, n, blk, 0)
		}
		checkStaged(b, w, typ, all[ci], blk)
		for r := range n {
			all[ci][r].args.Flags = flags
		}
	}
	med := make([][2]time.Duration, len(cases))
	for round := range 2 {
		for k := range cases {
			ci := k
			if round == 1 {
				ci = len(cases) - 1 - k
			}
			med[ci][round] = timeStaged(b, w, all[ci], iters)
		}
	}
	for ci, c := range cases {
		b.Run(c.String(), func(b *testing.B) {
			b.ReportMetric(float64(med[ci][0].Microseconds()), "µs-r1")
			b.ReportMetric(float64(med[ci][1].Microseconds()), "µs-r2")
			b.ReportMetric(float64(med[ci][0])/float64(med[0][0]), "vs-host-r1")
			b.ReportMetric(float64(med[ci][1])/float64(med[0][1]), "vs-host-r2")
		})
		for _, bb := range all[ci] {
			bb.close(b)
		}
	}
}
