package asym

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/stretchr/testify/require"
)

var allTypes = []mem.Type{mem.Host, mem.CUDA, mem.CUDAManaged, mem.DM, mem.Sim}

// The oracle below is written from ASYM.md and UCC's buffer conventions, as explicit
// tables; it shares no code with Plan.

// use says how a rank uses a buffer: "", "in", "out" or "inout".
type use struct{ src, dst string }

var uses = map[collective.Type]struct{ root, rootInPlace, other, otherInPlace use }{
	collective.Gather:        {use{"in", "out"}, use{"", "inout"}, use{"in", ""}, use{"in", ""}},
	collective.Gatherv:       {use{"in", "out"}, use{"", "inout"}, use{"in", ""}, use{"in", ""}},
	collective.Reduce:        {use{"in", "out"}, use{"", "inout"}, use{"in", ""}, use{"in", ""}},
	collective.Scatter:       {use{"in", "out"}, use{"in", ""}, use{"", "out"}, use{"", "out"}},
	collective.Scatterv:      {use{"in", "out"}, use{"in", ""}, use{"", "out"}, use{"", "out"}},
	collective.Bcast:         {use{"in", ""}, use{"in", ""}, use{"out", ""}, use{"out", ""}},
	collective.Allgather:     {use{"in", "out"}, use{"", "inout"}, use{"in", "out"}, use{"", "inout"}},
	collective.Allgatherv:    {use{"in", "out"}, use{"", "inout"}, use{"in", "out"}, use{"", "inout"}},
	collective.Allreduce:     {use{"in", "out"}, use{"", "inout"}, use{"in", "out"}, use{"", "inout"}},
	collective.Alltoall:      {use{"in", "out"}, use{"", "inout"}, use{"in", "out"}, use{"", "inout"}},
	collective.Alltoallv:     {use{"in", "out"}, use{"", "inout"}, use{"in", "out"}, use{"", "inout"}},
	collective.ReduceScatter: {use{"in", "out"}, use{"", "inout"}, use{"in", "out"}, use{"", "inout"}},
	collective.Barrier:       {},
}

// replaced is the buffer that gets the scratch on an asymmetric rank: ASYM.md's table for
// the rooted collectives, "like gather" for the others.
var replaced = map[collective.Type]string{
	collective.Gather: "dst", collective.Gatherv: "dst", collective.Reduce: "dst", collective.Scatter: "src", collective.Scatterv: "src",
	collective.Allgather: "dst", collective.Allgatherv: "dst", collective.Allreduce: "dst", collective.Alltoall: "dst", collective.Alltoallv: "dst",
	collective.ReduceScatter: "dst",
}

var vLayout = map[collective.Type]struct{ src, dst bool }{
	collective.Gatherv: {false, true}, collective.Scatterv: {true, false}, collective.Allgatherv: {false, true}, collective.Alltoallv: {true, true},
}

var reductions = map[collective.Type]bool{collective.Reduce: true, collective.Allreduce: true, collective.ReduceScatter: true}

// defaultOK lists what DefaultReach reaches, for non-reductions (NIC) and reductions
// (NIC and CPU).
var defaultOK = map[bool]map[mem.Type]bool{
	false: {mem.Host: true, mem.DM: true},
	true:  {mem.Host: true},
}

// expectScratch is one staged buffer: the bytes the layout spans, and the spans that
// ranks touch, found by marking every byte.
func expectScratch(b Buf, v bool, dtype int, how string, typ mem.Type) Scratch {
	type block struct{ displ, count int }
	var blocks []block
	if v {
		for i := range b.Counts {
			blocks = append(blocks, block{b.Displs[i], b.Counts[i]})
		}
	} else {
		blocks = []block{{0, b.Count}}
	}
	extent, moved := 0, 0
	for _, bl := range blocks {
		if bl.count > 0 { // an empty block's displacement is not part of the buffer
			extent = max(extent, bl.displ+bl.count)
		}
		moved += bl.count
	}
	if moved == 0 {
		return Scratch{}
	}
	marked := make([]bool, extent*dtype+1)
	for _, bl := range blocks {
		for i := bl.displ * dtype; i < (bl.displ+bl.count)*dtype; i++ {
			marked[i] = true
		}
	}
	var spans []Span
	for i := 0; i < len(marked); i++ {
		if !marked[i] {
			continue
		}
		j := i
		for marked[j] {
			j++
		}
		spans = append(spans, Span{i, j - i})
		i = j
	}
	return Scratch{
		Needed: true, Type: typ, Bytes: extent * dtype,
		CopyIn: strings.Contains(how, "in"), CopyOut: strings.Contains(how, "out"),
		Spans: spans,
	}
}

// expect is the oracle; mixed is a transport that takes mixed types (Reach.Mixed), for
// which each buffer is staged on its own merits; dmIn is a reach that lists DM in
// ReduceSrc (a reduction's read-only source in DM is the transport's to copy in, on a
// transport that takes mixed types).
func expect(a Args, allReach, mixed, dmIn bool) Staging {
	uu := uses[a.Coll]
	u := uu.other
	switch {
	case a.Rank == a.Root && a.InPlace:
		u = uu.rootInPlace
	case a.Rank == a.Root:
		u = uu.root
	case a.InPlace:
		u = uu.otherInPlace
	}
	ok := func(t mem.Type) bool { return allReach || defaultOK[reductions[a.Coll]][t] }
	lay := vLayout[a.Coll]
	var s Staging
	stageSrc := func(t mem.Type) { s.Src = expectScratch(a.Src, lay.src, a.DtypeSize, u.src, t) }
	stageDst := func(t mem.Type) { s.Dst = expectScratch(a.Dst, lay.dst, a.DtypeSize, u.dst, t) }
	if !mixed && u.src != "" && u.dst != "" && a.Src.Type != a.Dst.Type {
		keep, repl := a.Src.Type, a.Dst.Type
		stageKeep, stageRepl := stageSrc, stageDst
		if replaced[a.Coll] == "src" {
			keep, repl = repl, keep
			stageKeep, stageRepl = stageDst, stageSrc
		}
		target := keep
		if !ok(keep) {
			target = mem.Host
			stageKeep(mem.Host)
		}
		if repl != target {
			stageRepl(target)
		}
		return s
	}
	srcOK := ok(a.Src.Type) || dmIn && reductions[a.Coll] && u.src == "in" && a.Src.Type == mem.DM
	if u.src != "" && !srcOK {
		stageSrc(mem.Host)
	}
	if u.dst != "" && !ok(a.Dst.Type) {
		stageDst(mem.Host)
	}
	return s
}

// layouts are the buffers of one case: plain counts for plain buffers, v-layouts with
// gaps, unsorted and overlapping displacements, zero counts, and empty ones.
type layout struct {
	srcCount, dstCount int
	srcV, dstV         [2][]int // counts, displs
}

func planLayouts(r *rand.Rand, size int) []layout {
	ls := []layout{
		{3, 12, [2][]int{{3, 0, 5, 2}, {10, 0, 1, 20}}, [2][]int{{4, 4, 0, 1}, {4, 0, 50, 8}}},
		{5, 20, [2][]int{{4, 4, 0, 1}, {4, 0, 50, 8}}, [2][]int{{3, 0, 5, 2}, {10, 0, 1, 20}}},
		{0, 0, [2][]int{{0, 0, 0, 0}, {5, 0, 3, 1}}, [2][]int{{0, 0, 0, 0}, {0, 0, 0, 0}}},
		{0, 8, [2][]int{{0, 0, 0, 0}, {0, 9, 2, 4}}, [2][]int{{2, 3, 1, 4}, {0, 2, 5, 6}}},
		{6, 0, [2][]int{{2, 3, 1, 4}, {6, 2, 5, 0}}, [2][]int{{0, 0, 0, 0}, {7, 1, 0, 3}}},
	}
	randV := func() [2][]int {
		c, d := make([]int, size), make([]int, size)
		for i := range c {
			c[i], d[i] = r.IntN(7), r.IntN(40)
		}
		return [2][]int{c, d}
	}
	for range 2 {
		ls = append(ls, layout{r.IntN(30), r.IntN(30), randV(), randV()})
	}
	return ls
}

// TestPlanExhaustive checks Plan against the oracle over every collective, root and
// non-root, every pair of memory types, every datatype size, every layout, in place or
// not, under all-reachable (the ASYM.md baseline) and the default reach.
func TestPlanExhaustive(t *testing.T) {
	r := newRand(t)
	const size, root = 4, 1
	layouts := planLayouts(r, size)
	mixed := mem.DefaultReach()
	mixed.Mixed = true
	// A reach whose reductions take a DM source (Reach.ReduceSrc): with mixed types it
	// counts, without them it does not.
	dmIn, mixedDMIn := mem.DefaultReach(), mixed
	dmIn.ReduceSrc, mixedDMIn.ReduceSrc = []mem.Type{mem.DM}, []mem.Type{mem.DM}
	reaches := []struct {
		name string
		all  bool
		r    mem.Reach
	}{{"all-reachable", true, mem.AllReachable()}, {"default", false, mem.DefaultReach()}, {"default-mixed", false, mixed},
		{"default-dm-in", false, dmIn}, {"default-mixed-dm-in", false, mixedDMIn}}
	cases, baseline := 0, 0
	for _, rc := range reaches {
		for _, c := range collective.Types() {
			for _, rank := range []int{root, 2} {
				for _, st := range allTypes {
					for _, dt := range allTypes {
						for _, dtype := range []int{1, 2, 4, 8, 16} {
							for li, l := range layouts {
								for _, inPlace := range []bool{false, true} {
									a := Args{
										Coll: c, Root: root, Rank: rank, Size: size, DtypeSize: dtype, InPlace: inPlace,
										Src: Buf{Type: st, Count: l.srcCount, Counts: l.srcV[0], Displs: l.srcV[1]},
										Dst: Buf{Type: dt, Count: l.dstCount, Counts: l.dstV[0], Displs: l.dstV[1]},
									}
									got, err := Plan(a, rc.r)
									want := expect(a, rc.all, rc.r.Mixed, rc.r.Mixed && len(rc.r.ReduceSrc) > 0)
									if err != nil || !reflect.DeepEqual(got, want) {
										require.NoError(t, err)
										require.Equal(t, want, got, "%s reach, %s rank %d (root %d), src %v, dst %v, dtype %d, layout %d, in-place %v",
											rc.name, c, rank, root, st, dt, dtype, li, inPlace)
									}
									cases++
									if rc.all && c.IsRooted() && rank == root && !inPlace && st != dt && got.Any() {
										baseline++
									}
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("plan cases: %d (%d of them staged by the ASYM.md baseline on a root)", cases, baseline)
}

// TestPlanBaselineTable spells out ASYM.md's table with literal numbers.
func TestPlanBaselineTable(t *testing.T) {
	v := func(c ...int) []int { return c }
	tests := []struct {
		name string
		a    Args
		want Staging
	}{{
		"gather: dst in src's type, dst count × dtype, copy-out",
		Args{Coll: collective.Gather, Root: 2, Rank: 2, Size: 4, DtypeSize: 8,
			Src: Buf{Type: mem.CUDA, Count: 3}, Dst: Buf{Type: mem.Host, Count: 12}},
		Staging{Dst: Scratch{Needed: true, Type: mem.CUDA, Bytes: 96, CopyOut: true, Spans: []Span{{0, 96}}}},
	}, {
		"reduce: dst in src's type, dst count × dtype, copy-out",
		Args{Coll: collective.Reduce, Root: 0, Rank: 0, Size: 3, DtypeSize: 4,
			Src: Buf{Type: mem.Host, Count: 5}, Dst: Buf{Type: mem.CUDAManaged, Count: 5}},
		Staging{Dst: Scratch{Needed: true, Type: mem.Host, Bytes: 20, CopyOut: true, Spans: []Span{{0, 20}}}},
	}, {
		"gatherv: dst in src's type, max(displ+count) × dtype over non-empty blocks, copy-out of the blocks only",
		Args{Coll: collective.Gatherv, Root: 1, Rank: 1, Size: 3, DtypeSize: 2,
			Src: Buf{Type: mem.Sim, Count: 2}, Dst: Buf{Type: mem.Host, Counts: v(2, 3, 1), Displs: v(9, 0, 4)}},
		Staging{Dst: Scratch{Needed: true, Type: mem.Sim, Bytes: 22, CopyOut: true, Spans: []Span{{0, 6}, {8, 2}, {18, 4}}}},
	}, {
		"scatter: src in dst's type, src count × dtype, copy-in",
		Args{Coll: collective.Scatter, Root: 0, Rank: 0, Size: 2, DtypeSize: 16,
			Src: Buf{Type: mem.Host, Count: 10}, Dst: Buf{Type: mem.DM, Count: 5}},
		Staging{Src: Scratch{Needed: true, Type: mem.DM, Bytes: 160, CopyIn: true, Spans: []Span{{0, 160}}}},
	}, {
		"scatterv: src in dst's type, max(displ+count) × dtype over non-empty blocks, copy-in",
		Args{Coll: collective.Scatterv, Root: 3, Rank: 3, Size: 4, DtypeSize: 1,
			Src: Buf{Type: mem.CUDAManaged, Counts: v(1, 1, 0, 2), Displs: v(3, 3, 7, 0)}, Dst: Buf{Type: mem.CUDA, Count: 2}},
		Staging{Src: Scratch{Needed: true, Type: mem.CUDA, Bytes: 4, CopyIn: true, Spans: []Span{{0, 2}, {3, 1}}}},
	}, {
		"gather non-root: one buffer, never asymmetric",
		Args{Coll: collective.Gather, Root: 0, Rank: 1, Size: 2, DtypeSize: 4,
			Src: Buf{Type: mem.CUDA, Count: 3}, Dst: Buf{Type: mem.Host, Count: 6}},
		Staging{},
	}, {
		"gather root in place: no asymmetry",
		Args{Coll: collective.Gather, Root: 0, Rank: 0, Size: 2, DtypeSize: 4, InPlace: true,
			Src: Buf{Type: mem.CUDA, Count: 3}, Dst: Buf{Type: mem.Host, Count: 6}},
		Staging{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Plan(tt.a, mem.AllReachable())
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestPlanReach spells out the rules beyond the baseline with the default reach.
func TestPlanReach(t *testing.T) {
	host := func(bytes int, in, out bool) Scratch {
		return Scratch{Needed: true, Type: mem.Host, Bytes: bytes, CopyIn: in, CopyOut: out, Spans: []Span{{0, bytes}}}
	}
	tests := []struct {
		name string
		a    Args
		want Staging
	}{{
		"allgather with matching sim buffers: both through host",
		Args{Coll: collective.Allgather, Rank: 0, Size: 2, DtypeSize: 4, Src: Buf{Type: mem.Sim, Count: 2}, Dst: Buf{Type: mem.Sim, Count: 4}},
		Staging{Src: host(8, true, false), Dst: host(16, false, true)},
	}, {
		"gather root, sim src, host dst: the src's type is unreachable, so host, and dst stays",
		Args{Coll: collective.Gather, Root: 0, Rank: 0, Size: 2, DtypeSize: 1, Src: Buf{Type: mem.Sim, Count: 2}, Dst: Buf{Type: mem.Host, Count: 4}},
		Staging{Src: host(2, true, false)},
	}, {
		"in-place allreduce on cuda: copy in and out",
		Args{Coll: collective.Allreduce, Rank: 1, Size: 2, DtypeSize: 8, InPlace: true, Dst: Buf{Type: mem.CUDA, Count: 3}},
		Staging{Dst: host(24, true, true)},
	}, {
		"allreduce on dm: the NIC reaches it, the CPU does not",
		Args{Coll: collective.Allreduce, Rank: 1, Size: 2, DtypeSize: 4, Src: Buf{Type: mem.DM, Count: 3}, Dst: Buf{Type: mem.DM, Count: 3}},
		Staging{Src: host(12, true, false), Dst: host(12, false, true)},
	}, {
		"allgather on dm: reachable",
		Args{Coll: collective.Allgather, Rank: 1, Size: 2, DtypeSize: 4, Src: Buf{Type: mem.DM, Count: 3}, Dst: Buf{Type: mem.DM, Count: 6}},
		Staging{},
	}, {
		"bcast non-root on sim: copy-out only",
		Args{Coll: collective.Bcast, Root: 0, Rank: 1, Size: 2, DtypeSize: 2, Src: Buf{Type: mem.Sim, Count: 5}},
		Staging{Src: host(10, false, true)},
	}, {
		"bcast root on sim: copy-in only",
		Args{Coll: collective.Bcast, Root: 1, Rank: 1, Size: 2, DtypeSize: 2, Src: Buf{Type: mem.Sim, Count: 5}},
		Staging{Src: host(10, true, false)},
	}, {
		"scatter root in place on cuda: copy-in only",
		Args{Coll: collective.Scatter, Root: 0, Rank: 0, Size: 2, DtypeSize: 4, InPlace: true, Src: Buf{Type: mem.CUDA, Count: 4}},
		Staging{Src: host(16, true, false)},
	}, {
		"alltoall host to dm: dst in host, copy-out",
		Args{Coll: collective.Alltoall, Rank: 0, Size: 2, DtypeSize: 1, Src: Buf{Type: mem.Host, Count: 4}, Dst: Buf{Type: mem.DM, Count: 4}},
		Staging{Dst: host(4, false, true)},
	}, {
		"barrier: nothing",
		Args{Coll: collective.Barrier, Rank: 1, Size: 2, Src: Buf{Type: mem.Sim, Count: -1}},
		Staging{},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Plan(tt.a, mem.DefaultReach())
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestPlanReduceSrc: a reach that lists DM in ReduceSrc, on a transport that takes
// mixed types, leaves a reduction's read-only DM source unstaged, and stages what the
// reduction writes in DM (its destination, an in-place buffer); without mixed types
// it changes nothing.
func TestPlanReduceSrc(t *testing.T) {
	host := func(bytes int, in, out bool) Scratch {
		return Scratch{Needed: true, Type: mem.Host, Bytes: bytes, CopyIn: in, CopyOut: out, Spans: []Span{{0, bytes}}}
	}
	r := mem.DefaultReach()
	r.ReduceSrc, r.Mixed = []mem.Type{mem.DM}, true
	unmixed := r
	unmixed.Mixed = false
	dm := func(n int) Buf { return Buf{Type: mem.DM, Count: n} }
	tests := []struct {
		name  string
		a     Args
		reach mem.Reach
		want  Staging
	}{
		{"allreduce dm to dm: the source is the transport's, the destination staged",
			Args{Coll: collective.Allreduce, Rank: 1, Size: 2, DtypeSize: 4, Src: dm(3), Dst: dm(3)}, r,
			Staging{Dst: host(12, false, true)}},
		{"allreduce dm to host: nothing staged",
			Args{Coll: collective.Allreduce, Rank: 1, Size: 2, DtypeSize: 4, Src: dm(3), Dst: Buf{Type: mem.Host, Count: 3}}, r,
			Staging{}},
		{"in-place allreduce on dm: read and written, so staged",
			Args{Coll: collective.Allreduce, Rank: 1, Size: 2, DtypeSize: 4, InPlace: true, Dst: dm(3)}, r,
			Staging{Dst: host(12, true, true)}},
		{"reduce non-root from dm: nothing staged",
			Args{Coll: collective.Reduce, Root: 0, Rank: 1, Size: 2, DtypeSize: 8, Src: dm(2)}, r,
			Staging{}},
		{"reduce_scatter dm to dm: the destination staged",
			Args{Coll: collective.ReduceScatter, Rank: 0, Size: 2, DtypeSize: 2, Src: dm(4), Dst: dm(2)}, r,
			Staging{Dst: host(4, false, true)}},
		{"allreduce dm to host without mixed types: the seed's rule stages the source",
			Args{Coll: collective.Allreduce, Rank: 1, Size: 2, DtypeSize: 4, Src: dm(3), Dst: Buf{Type: mem.Host, Count: 3}}, unmixed,
			Staging{Src: host(12, true, false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Plan(tt.a, tt.reach)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	require.True(t, r.ReducesFrom(mem.DM))
	require.False(t, mem.DefaultReach().ReducesFrom(mem.DM))
	bad := r
	bad.ReduceSrc = []mem.Type{mem.DM, mem.Sim}
	require.False(t, bad.ReducesFrom(mem.Sim), "ReduceSrc does not make a type the NIC cannot register reachable")
}

func TestPlanInvalid(t *testing.T) {
	ok := Args{Coll: collective.Gatherv, Root: 0, Rank: 0, Size: 4, DtypeSize: 4,
		Src: Buf{Type: mem.Host, Count: 2}, Dst: Buf{Type: mem.Sim, Counts: []int{1, 2, 3, 4}, Displs: []int{0, 1, 3, 6}}}
	tests := []struct {
		msg string
		mod func(a *Args)
	}{
		{"asym: Args.Coll is unknown (99)", func(a *Args) { a.Coll = 99 }},
		{"asym: Args.Size is 0, want at least 1", func(a *Args) { a.Size = 0 }},
		{"asym: Args.Rank is 4, want [0, 4)", func(a *Args) { a.Rank = 4 }},
		{"asym: Args.Rank is -1, want [0, 4)", func(a *Args) { a.Rank = -1 }},
		{"asym: Args.Root is 7, want [0, 4)", func(a *Args) { a.Root = 7 }},
		{"asym: Args.Root is 4, want [0, 4)", func(a *Args) { a.Root = 4 }},
		{"asym: Args.Root is -1, want [0, 4)", func(a *Args) { a.Root = -1 }},
		{"asym: Args.DtypeSize is 0, want 1, 2, 4, 8 or 16", func(a *Args) { a.DtypeSize = 0 }},
		{"asym: Args.DtypeSize is 3, want 1, 2, 4, 8 or 16", func(a *Args) { a.DtypeSize = 3 }},
		{"asym: Args.Src.Count is negative (-2)", func(a *Args) { a.Src.Count = -2 }},
		{"asym: Args.Src.Type is unknown (9)", func(a *Args) { a.Src.Type = 9 }},
		{"asym: Args.Dst.Counts has 3 entries, want Args.Size (4)", func(a *Args) { a.Dst.Counts = a.Dst.Counts[:3] }},
		{"asym: Args.Dst.Displs has 0 entries, want Args.Size (4)", func(a *Args) { a.Dst.Displs = nil }},
		{"asym: Args.Dst.Counts[2] is negative (-3)", func(a *Args) { a.Dst.Counts = []int{1, 2, -3, 4} }},
		{"asym: Args.Dst.Displs[3] is negative (-1)", func(a *Args) { a.Dst.Displs = []int{0, 1, 3, -1} }},
		{fmt.Sprintf("asym: Args.Src.Count is %d: 4-byte elements overflow int", math.MaxInt/2),
			func(a *Args) { a.Src.Count = math.MaxInt / 2 }},
		{fmt.Sprintf("asym: Args.Dst.Displs[1] + Counts[1] is %d + 2: 4-byte elements overflow int", math.MaxInt/4-1),
			func(a *Args) { a.Dst.Displs = []int{0, math.MaxInt/4 - 1, 0, 0} }},
		{"asym: Args.Src.Counts has 0 entries, want Args.Size (4)", func(a *Args) { a.Coll, a.Src.Type = collective.Alltoallv, mem.Host }},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			a := ok
			tt.mod(&a)
			_, err := Plan(a, mem.AllReachable())
			require.EqualError(t, err, tt.msg)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorIs(t, err, mem.ErrInvalid)
		})
	}
	_, err := Plan(ok, mem.AllReachable())
	require.NoError(t, err)
}

// TestPlanIgnores checks that Plan neither reads nor validates what the rank does not use.
func TestPlanIgnores(t *testing.T) {
	bad := Buf{Type: 200, Count: -1, Counts: []int{-1}, Displs: []int{-1}}
	for _, a := range []Args{
		{Coll: collective.Gatherv, Root: 0, Rank: 1, Size: 2, DtypeSize: 4, Src: Buf{Count: 1}, Dst: bad},
		{Coll: collective.Scatterv, Root: 0, Rank: 1, Size: 2, DtypeSize: 4, Src: bad, Dst: Buf{Count: 1}},
		{Coll: collective.Allreduce, Root: -5, Rank: 1, Size: 2, DtypeSize: 4, InPlace: true, Src: bad, Dst: Buf{Count: 1}},
		{Coll: collective.Bcast, Root: 1, Rank: 1, Size: 2, DtypeSize: 4, Src: Buf{Count: 1}, Dst: bad},
		{Coll: collective.Barrier, Root: 9, Rank: 0, Size: 1, Src: bad, Dst: bad},
	} {
		s, err := Plan(a, mem.DefaultReach())
		require.NoError(t, err, "%s rank %d", a.Coll, a.Rank)
		require.False(t, s.Any())
	}
}

// TestPlanStrongAsymmetry: each rank of one collective plans alone, from different
// buffers and reaches, and no decision depends on another rank.
func TestPlanStrongAsymmetry(t *testing.T) {
	ranks := []struct {
		src, dst mem.Type
		reach    mem.Reach
		staged   bool
	}{
		{mem.Host, mem.Host, mem.DefaultReach(), false},
		{mem.Host, mem.Sim, mem.DefaultReach(), true},
		{mem.CUDA, mem.CUDA, mem.AllReachable(), false},
		{mem.CUDA, mem.CUDA, mem.DefaultReach(), true},
	}
	for rank, rk := range ranks {
		a := Args{Coll: collective.Allgather, Rank: rank, Size: len(ranks), DtypeSize: 4,
			Src: Buf{Type: rk.src, Count: 2}, Dst: Buf{Type: rk.dst, Count: 8}}
		s, err := Plan(a, rk.reach)
		require.NoError(t, err)
		require.Equal(t, rk.staged, s.Any(), "rank %d: %v", rank, s)
	}
}

func TestArgErrorIsShared(t *testing.T) {
	require.True(t, errors.Is(&argError{"x"}, mem.ErrInvalid))
}

func TestStagingString(t *testing.T) {
	s := Staging{Dst: Scratch{Needed: true, Type: mem.Sim, Bytes: 64, CopyIn: true, CopyOut: true}}
	require.Equal(t, "src: user; dst: sim scratch, 64 B, copy-in, copy-out", s.String())
}
