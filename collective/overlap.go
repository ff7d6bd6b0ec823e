package collective

import "sort"

// sharedBlocks finds two non-empty blocks of a v-layout that share elements, and
// reports whether there are any. An output whose blocks overlap has no defined
// contents: two peers' data land on the same bytes in an order no rank controls
// (MPI calls such receive displacements erroneous too).
//
// Displacements in rank order, the usual case, take one pass and no allocation;
// others are sorted by displacement first.
func sharedBlocks(counts, displs []int) (i, j int, shared bool) {
	prev, end := -1, 0 // the block reaching furthest so far, and its end
	sorted := true
	for k, c := range counts {
		if c == 0 {
			continue
		}
		d := displs[k]
		if prev >= 0 && d < displs[prev] {
			sorted = false
			break
		}
		if prev >= 0 && d < end {
			return prev, k, true
		}
		if d+c > end || prev < 0 {
			prev, end = k, d+c
		}
	}
	if sorted {
		return 0, 0, false
	}
	idx := make([]int, 0, len(counts))
	for k, c := range counts {
		if c != 0 {
			idx = append(idx, k)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return displs[idx[a]] < displs[idx[b]] })
	prev, end = -1, 0
	for _, k := range idx {
		d := displs[k]
		if prev >= 0 && d < end {
			return min(prev, k), max(prev, k), true
		}
		if d+counts[k] > end || prev < 0 {
			prev, end = k, d+counts[k]
		}
	}
	return 0, 0, false
}
