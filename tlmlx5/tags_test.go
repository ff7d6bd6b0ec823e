package tlmlx5

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
)

// tagEndpoint is rank r's lazy endpoint in a team of n (no QP is made): enough to
// build tasks and read their graphs.
func tagEndpoint(t *testing.T, ctx driver.Context, n, r int) driver.Endpoint {
	t.Helper()
	ep, _, err := ctx.NewEndpoint(driver.TeamParams{Rank: r, Size: n, NextSeq: func() uint64 { return 1 },
		Messenger: fakeMessenger{m: &fakeMessages{close: map[int]bool{}}, rank: r}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ep.Close()) })
	return ep
}

// uniformArgs is rank r's arguments for c on a team of n with one element per block,
// built without a collCase's n×n v-layouts (too large at tens of thousands of ranks).
func uniformArgs(c collective.Type, n, r, root, count int) collective.Args {
	ones, displs := make([]int, n), make([]int, n)
	for i := range ones {
		ones[i], displs[i] = 1, i
	}
	v := collective.Buf{Counts: ones, Displs: displs}
	a := collective.Args{Rank: r, Size: n, Root: root, DTypeSize: collective.Int32.Size()}
	switch c {
	case collective.Gatherv, collective.Allgatherv:
		a.Src.Count, a.Dst = 1, v
	case collective.Scatterv:
		a.Src, a.Dst.Count = v, 1
	case collective.Alltoallv:
		a.Src, a.Dst = v, v
	default:
		return plainCase(c, "", n, root, count, collective.Int32, collective.OpSum).args(r)
	}
	return a
}

// buildTask builds rank r's task for c with algorithm alg ("" for the default) on ep
// and returns it or NewTask's error. The caller closes it.
func buildTask(t *testing.T, ep driver.Endpoint, c collective.Type, alg string, a collective.Args) (*task, error) {
	t.Helper()
	rr := newRankRun(t, 1, c, collective.Int32, collective.OpSum, alg, a)
	k, err := ep.NewTask(&rr.spec)
	if err != nil {
		return nil, err
	}
	return k.(*task), nil
}

// openTagCtx opens soft0 for t, closed after t's endpoints (t.Cleanup runs last first).
func openTagCtx(t *testing.T) driver.Context {
	ctx := openSoft(t)
	t.Cleanup(func() { require.NoError(t, ctx.Close()) })
	return ctx
}

// topTag is the largest tag of a task's sends and receives (-1: none).
func topTag(k *task) int {
	top := -1
	for i := range k.ops {
		if o := &k.ops[i]; o.kind == opSend || o.kind == opRecv {
			top = max(top, o.tag)
		}
	}
	return top
}

// TestAlgorithmTags holds each algorithm's tag count (the table's tags, which Fits and
// the default choice go by) to the graphs it builds: on teams of 1 to 33 ranks, every
// rank of every root shape, with the default and extra radixes, uses only tags below
// it. (TestAlgorithms and TestLargeTeam check that both ends of every edge agree on
// them, with data.)
func TestAlgorithmTags(t *testing.T) {
	ctx := openTagCtx(t)
	built := 0
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 32, 33} {
		eps := make([]driver.Endpoint, n)
		for r := range eps {
			eps[r] = tagEndpoint(t, ctx, n, r)
		}
		for _, c := range collective.Types() {
			for _, alg := range algNames(c) {
				if alg != "" && Fits(c, alg, n) != nil {
					continue
				}
				for _, root := range rootsOf(c, n) {
					for r := range n {
						k, err := buildTask(t, eps[r], c, alg, uniformArgs(c, n, r, root, 3*n))
						require.NoError(t, err, "%v %q n=%d root %d rank %d", c, alg, n, root, r)
						a := named(c, k.alg)
						require.Less(t, topTag(k), a.tags(n), "%v %s n=%d root %d rank %d: a tag at or above the table's count", c, k.alg, n, root, r)
						require.NoError(t, k.Close())
						built++
					}
				}
			}
		}
	}
	t.Logf("%d tasks built", built)
}

// limitCounts is the element counts the limit test builds c with: one vector of n
// elements and a large one for the vector collectives (the default choice goes by the
// vector's size), one element per block for the others (their buffers grow with n).
func limitCounts(c collective.Type, n int) []int {
	switch c {
	case collective.Bcast, collective.Reduce, collective.Allreduce:
		return []int{n, 1 << 20}
	}
	return []int{1}
}

// TestAlgorithmTagLimits: at the largest team its tag count allows, each algorithm
// fits (Fits) and builds (NewTask, for the root, rank 1 and the last rank); one rank
// more, both refuse it with ErrNotSupported, and the default choice takes another
// algorithm where one fits, else refuses with ErrNotSupported: no default fails
// otherwise on a large team. Every algorithm runs on 16384 ranks. Under -short (the
// VM suite, emulated) only the first algorithm of each tag count runs: the others are
// make test's host pass.
func TestAlgorithmTagLimits(t *testing.T) {
	ctx := openTagCtx(t)
	counted := map[uintptr]bool{}
	for i := range algorithms {
		a := &algorithms[i]
		if a.tags(1<<20) <= maxTags {
			continue // a count that does not grow with the team
		}
		f := reflect.ValueOf(a.tags).Pointer()
		if testing.Short() && counted[f] {
			continue
		}
		counted[f] = true
		lo, hi := 1, 1<<20 // a.tags(lo) fits, a.tags(hi) does not
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; a.tags(mid) <= maxTags {
				lo = mid
			} else {
				hi = mid
			}
		}
		require.GreaterOrEqual(t, lo, 16384, "%v %s cannot run on 16384 ranks", a.coll, a.name)
		t.Run(fmt.Sprintf("%v/%s/%d", a.coll, a.name, lo), func(t *testing.T) {
			counts := limitCounts(a.coll, lo)
			require.NoError(t, Fits(a.coll, a.name, lo))
			for _, r := range []int{0, 1, lo - 1} {
				k, err := buildTask(t, tagEndpoint(t, ctx, lo, r), a.coll, a.name, uniformArgs(a.coll, lo, r, 0, counts[0]))
				require.NoError(t, err, "rank %d", r)
				require.Less(t, topTag(k), a.tags(lo))
				require.NoError(t, k.Close())
			}
			n := lo + 1
			require.ErrorIs(t, Fits(a.coll, a.name, n), driver.ErrNotSupported)
			ep := tagEndpoint(t, ctx, n, 1)
			_, err := buildTask(t, ep, a.coll, a.name, uniformArgs(a.coll, n, 1, 0, counts[0]))
			require.ErrorIs(t, err, driver.ErrNotSupported)
			for _, count := range limitCounts(a.coll, n) {
				bytes := count * collective.Int32.Size()
				if a.coll == collective.ReduceScatter || a.coll == collective.Allgather || a.coll == collective.Alltoall {
					bytes *= n // the default goes by the larger buffer
				}
				other := ""
				if b := choose(a.coll, n, bytes); b != nil {
					other = b.name
				}
				k, err := buildTask(t, tagEndpoint(t, ctx, n, 1), a.coll, "", uniformArgs(a.coll, n, 1, 0, count))
				if other == "" {
					require.ErrorIs(t, err, driver.ErrNotSupported, "the default choice for %d elements", count)
					continue
				}
				require.NoError(t, err, "the default choice for %d elements", count)
				require.NoError(t, k.Close())
				require.Equal(t, other, named(a.coll, k.alg).name, "the default choice for %d elements", count)
				require.NotEqual(t, a.name, other)
			}
		})
	}
}
