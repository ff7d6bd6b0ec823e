package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/reduce"
)

// TestReferenceMatchesSemantics runs the new collectives in plain Go, from
// every rank's input as the tool writes it, by the rules of the collective
// table, and compares with what the checker expects. A reference that only
// agreed with itself (the wrong block, a count of the wrong side, a gap
// overwritten) would pass the tool's runs only if the library had the
// same bug.
func TestReferenceMatchesSemantics(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		for _, count := range []int{0, 1, 7} {
			for _, inPlace := range []bool{false, true} {
				for _, c := range newColls {
					name := fmt.Sprintf("%v/n=%d/count=%d/in-place=%v", c, n, count, inPlace)
					ref := newReference(7, coll.Int16, coll.OpSum, n)
					const it = 3
					es := ref.dt.Size()
					shapes := make([]shape, n)
					in := make([][]byte, n)
					for r := range n {
						shapes[r] = newShape(c, r, n, count, 0, inPlace)
						in[r] = ref.inputOf(shapes[r], it)
						require.Equal(t, max(shapes[r].srcCount, shapes[r].dstCount*b2i(inPlace)), len(in[r])/es, "%s: rank %d's input fills its buffer", name, r)
					}
					for r := range n {
						s := shapes[r]
						var got []byte
						switch c {
						case coll.ReduceScatter:
							acc := bytes.Clone(in[0])
							for p := 1; p < n; p++ {
								require.NoError(t, reduce.Into(acc, in[p], ref.dt, ref.op))
							}
							mine := acc[r*count*es : (r+1)*count*es]
							got = mine
							if inPlace {
								got = bytes.Clone(in[r])
								copy(got[r*count*es:], mine)
							}
						case coll.Allgatherv:
							got = make([]byte, s.vExtent*es)
							canary(ref.seed, it, r, got)
							if inPlace {
								got = bytes.Clone(in[r])
							}
							for p := range n {
								own := in[p]
								if inPlace {
									own = own[s.displs[p]*es:]
								}
								require.Equal(t, s.counts[p], shapes[p].counts[p], "%s: team-uniform counts", name)
								copy(got[s.displs[p]*es:], own[:s.counts[p]*es])
							}
						case coll.Alltoallv:
							got = make([]byte, s.vExtent*es)
							canary(ref.seed, it, r, got)
							if inPlace {
								got = bytes.Clone(in[r])
							}
							for p := range n {
								// What p sends r, from p's send side.
								sc, sd := shapes[p].sendCounts, shapes[p].sendDispls
								if inPlace {
									sc, sd = shapes[p].counts, shapes[p].displs
								}
								require.Equal(t, sc[r], s.counts[p], "%s: Src.Counts[%d] on %d = Dst.Counts[%d] on %d", name, r, p, p, r)
								copy(got[s.displs[p]*es:], in[p][sd[r]*es:(sd[r]+sc[r])*es])
							}
						}
						want, err := ref.expected(s, it)
						require.NoError(t, err)
						require.Equal(t, got, want, "%s: rank %d", name, r)
					}
				}
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestAlltoallvCounts: the count matrix varies between pairs, differs
// between a rank's two sides, and is symmetric in place, where one layout
// serves both.
func TestAlltoallvCounts(t *testing.T) {
	const n, count = 5, 4
	seen := map[int]bool{}
	asym := false
	for i := range n {
		for j := range n {
			seen[pairCount(count, i, j, false)] = true
			asym = asym || pairCount(count, i, j, false) != pairCount(count, j, i, false)
			require.Equal(t, pairCount(count, i, j, true), pairCount(count, j, i, true))
		}
	}
	require.Len(t, seen, 3, "count-1, count and count+1 all occur")
	require.True(t, asym)
	require.Equal(t, 0, pairCount(0, 1, 1, false), "never negative")
	s := newShape(coll.Alltoallv, 2, n, count, 0, false)
	require.NotEqual(t, s.sendCounts, s.counts)
	require.NotEqual(t, s.sendDispls, s.displs, "the two sides are laid out differently")
	ip := newShape(coll.Alltoallv, 2, n, count, 0, true)
	require.Zero(t, ip.srcCount, "in place, src is unused")
	require.Equal(t, ip.vExtent, ip.dstCount)
}

// TestHalfSumsExactAtScale: --check's half-precision sums come out the same in any
// order of folding at every team size, so that a correct collective never fails the
// check (bfloat16 sums of 1024 ranks differed in 15 elements of 4096 between a one-pass
// fold and one rank at a time, before gen thinned the inputs past 64 ranks).
func TestHalfSumsExactAtScale(t *testing.T) {
	const count = 2048
	for _, dt := range []coll.DType{coll.BFloat16, coll.Float16} {
		for _, n := range []int{64, 65, 513, 1024, 4096} {
			ref := newReference(uint64(n), dt, coll.OpSum, n)
			in := make([][]byte, n)
			for r := range in {
				in[r] = ref.input(1, r, count)
			}
			oneRankAtATime, err := ref.reduced(1, n, count)
			require.NoError(t, err)
			onePass := make([]byte, len(oneRankAtATime))
			require.NoError(t, reduce.IntoMany(onePass, in, dt, coll.OpSum))
			backwards := bytes.Clone(in[n-1])
			for r := n - 2; r >= 0; r-- {
				require.NoError(t, reduce.Into(backwards, in[r], dt, coll.OpSum))
			}
			require.Equal(t, oneRankAtATime, onePass, "%v, %d ranks: one pass", dt, n)
			require.Equal(t, oneRankAtATime, backwards, "%v, %d ranks: backwards", dt, n)
			nonzero := 0
			for _, b := range in[n-1] {
				if b != 0 {
					nonzero++
				}
			}
			require.NotZero(t, nonzero, "%v, %d ranks: the last rank contributes", dt, n)
		}
	}
}
