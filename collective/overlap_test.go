package collective

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
)

// bruteShared is sharedBlocks by pairs: whether any two non-empty blocks meet.
func bruteShared(counts, displs []int) bool {
	for i := range counts {
		for j := i + 1; j < len(counts); j++ {
			if counts[i] > 0 && counts[j] > 0 && displs[i] < displs[j]+counts[j] && displs[j] < displs[i]+counts[i] {
				return true
			}
		}
	}
	return false
}

// TestSharedBlocks holds the one-pass and sorted paths to the pairwise answer over
// seeded random layouts, in rank order and shuffled, with empty blocks anywhere, and
// checks that the two blocks it names really share elements.
func TestSharedBlocks(t *testing.T) {
	rnd := testutil.Rand(t)
	var overlapping, disjoint, unsorted int
	for it := 0; it < 20000; it++ {
		n := 1 + rnd.IntN(12)
		counts, displs := make([]int, n), make([]int, n)
		at := 0
		for k := range counts {
			if rnd.IntN(5) > 0 {
				counts[k] = 1 + rnd.IntN(4)
			}
			at += rnd.IntN(3) - 1 // a step back now and then makes an overlap
			at = max(at, 0)
			displs[k] = at
			at += counts[k]
		}
		if rnd.IntN(2) == 0 {
			rnd.Shuffle(n, func(a, b int) {
				counts[a], counts[b] = counts[b], counts[a]
				displs[a], displs[b] = displs[b], displs[a]
			})
			unsorted++
		}
		i, j, shared := sharedBlocks(counts, displs)
		want := bruteShared(counts, displs)
		require.Equal(t, want, shared, "counts %v displs %v", counts, displs)
		if !shared {
			disjoint++
			continue
		}
		overlapping++
		require.Less(t, i, j)
		require.Positive(t, counts[i])
		require.Positive(t, counts[j])
		require.True(t, displs[i] < displs[j]+counts[j] && displs[j] < displs[i]+counts[i],
			"blocks %d and %d named, counts %v displs %v", i, j, counts, displs)
	}
	require.Greater(t, overlapping, 1000, "the generator makes overlaps")
	require.Greater(t, disjoint, 1000, "the generator makes disjoint layouts")
	require.Greater(t, unsorted, 1000)
}

// TestOutputBlocksMustNotOverlap: a v-layout that a collective writes is refused where
// two non-empty blocks share elements, naming the buffer and both blocks; one it only
// reads may overlap (a scatterv root may send one block to several ranks), and empty
// blocks are no part of the buffer.
func TestOutputBlocksMustNotOverlap(t *testing.T) {
	over := Buf{Counts: []int{2, 2, 2}, Displs: []int{0, 3, 4}}
	for _, tt := range []struct {
		c    Type
		a    Args
		want string
	}{
		{Gatherv, Args{Size: 3, Src: Buf{Count: 2}, Dst: over},
			"Args.Dst blocks 1 and 2 share elements (Displs 3 and 4, Counts 2 and 2): the blocks of an output must not overlap"},
		{Gatherv, Args{Size: 3, InPlace: true, Dst: Buf{Counts: []int{2, 2, 2}, Displs: []int{4, 0, 1}}},
			"Args.Dst blocks 1 and 2 share elements (Displs 0 and 1, Counts 2 and 2): the blocks of an output must not overlap"},
		{Allgatherv, Args{Size: 3, Rank: 1, Src: Buf{Count: 2}, Dst: over}, "Args.Dst blocks 1 and 2 share elements"},
		{Alltoallv, Args{Size: 3, Src: Buf{Counts: []int{1, 1, 1}, Displs: []int{0, 1, 2}}, Dst: Buf{Counts: []int{1, 1, 1}, Displs: []int{2, 0, 2}}},
			"Args.Dst blocks 0 and 2 share elements"},
	} {
		_, err := tt.c.Layout(tt.a)
		require.ErrorIs(t, err, ErrInvalid, "%v", tt.c)
		require.ErrorContains(t, err, tt.want, "%v", tt.c)
	}
	for _, tt := range []struct {
		c Type
		a Args
	}{
		{Scatterv, Args{Size: 3, Src: over, Dst: Buf{Count: 2}}},                                               // read only
		{Alltoallv, Args{Size: 3, Src: over, Dst: Buf{Counts: []int{2, 2, 2}, Displs: []int{4, 2, 0}}}},        // src read only; dst disjoint, unsorted
		{Gatherv, Args{Size: 3, Src: Buf{Count: 2}, Dst: Buf{Counts: []int{2, 0, 2}, Displs: []int{0, 1, 2}}}}, // an empty block's displacement
		{Gatherv, Args{Size: 3, Rank: 1, Src: Buf{Count: 2}, Dst: over}},                                       // not the root: Dst is not used
	} {
		_, err := tt.c.Layout(tt.a)
		require.NoError(t, err, "%v %+v", tt.c, tt.a)
	}
}
