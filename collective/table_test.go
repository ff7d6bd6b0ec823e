package collective

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The table is consistent with itself: names parse back, non-rooted collectives use
// one side for everyone, an in-place form exists exactly where it is described, and
// every used buffer is read or written.
func TestTableRows(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Types() {
		d := Describe(c)
		require.NotNil(t, d)
		require.Equal(t, c, d.Type)
		require.False(t, seen[d.Name], "duplicate name %s", d.Name)
		seen[d.Name] = true
		got, err := ParseType(strings.ToUpper(d.Name))
		require.NoError(t, err)
		require.Equal(t, c, got)
		if d.Rooted {
			require.Equal(t, Side{Src: d.Other.Src, Dst: d.Other.Dst}, d.Other, "%v: non-roots have no in-place form", c)
		} else {
			require.Equal(t, d.Root, d.Other, "%v", c)
		}
		for i, s := range []*Side{&d.Root, &d.Other} {
			hasIP := s.InPlaceSrc.Used() || s.InPlaceDst.Used()
			if i == 0 && d.InPlace {
				require.True(t, hasIP, "%v: in place uses a buffer", c)
			}
			if !d.InPlace {
				require.False(t, hasIP, "%v", c)
			}
			for _, u := range []Use{s.Src, s.Dst, s.InPlaceSrc, s.InPlaceDst} {
				require.Equal(t, u.Used(), u.Dir != 0, "%v: a used buffer has a direction", c)
			}
		}
	}
	require.Nil(t, Describe(0))
	require.Nil(t, Describe(numTypes))
	_, err := ParseType("allgatherw")
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, "Type(0)", Type(0).String())
}

func TestLayout(t *testing.T) {
	type bufs struct{ src, dst BufLayout }
	v := Buf{Counts: []int{2, 0, 3}, Displs: []int{5, 100, 0}}
	for _, tt := range []struct {
		name  string
		c     Type
		a     Args
		want  bufs
		block int
	}{
		{"gather root", Gather, Args{Rank: 1, Root: 1, Size: 3, Src: Buf{Count: 4}, Dst: Buf{Count: 12}},
			bufs{BufLayout{Use: Use{Block, In}, Elems: 4, Count: 4}, BufLayout{Use: Use{Blocks, Out}, Elems: 12, Count: 12}}, 4},
		{"gather leaf ignores dst", Gather, Args{Rank: 0, Root: 1, Size: 3, Src: Buf{Count: 4}, Dst: Buf{Count: -7}},
			bufs{BufLayout{Use: Use{Block, In}, Elems: 4, Count: 4}, BufLayout{}}, 4},
		// InPlace is the root's: a leaf that sets it still sends its block.
		{"gather leaf ignores in place", Gather, Args{Rank: 0, Root: 1, Size: 3, InPlace: true, Src: Buf{Count: 4}, Dst: Buf{Count: -7}},
			bufs{BufLayout{Use: Use{Block, In}, Elems: 4, Count: 4}, BufLayout{}}, 4},
		{"gather root in place", Gather, Args{Rank: 1, Root: 1, Size: 3, InPlace: true, Src: Buf{Count: -1}, Dst: Buf{Count: 12}},
			bufs{BufLayout{}, BufLayout{Use: Use{Blocks, In | Out}, Elems: 12, Count: 12}}, 4},
		{"gatherv root", Gatherv, Args{Rank: 2, Root: 2, Size: 3, Src: Buf{Count: 3}, Dst: v},
			bufs{BufLayout{Use: Use{Own, In}, Elems: 3, Count: 3}, BufLayout{Use: Use{V, Out}, Elems: 7, Counts: v.Counts, Displs: v.Displs}}, -1},
		{"reduce_scatter", ReduceScatter, Args{Rank: 0, Size: 3, Src: Buf{Count: 6}, Dst: Buf{Count: 2}},
			bufs{BufLayout{Use: Use{Blocks, In}, Elems: 6, Count: 6}, BufLayout{Use: Use{Block, Out}, Elems: 2, Count: 2}}, 2},
		{"reduce_scatter in place", ReduceScatter, Args{Rank: 0, Size: 3, InPlace: true, Dst: Buf{Count: 6}},
			bufs{BufLayout{}, BufLayout{Use: Use{Blocks, In | Out}, Elems: 6, Count: 6}}, 2},
		{"allgatherv", Allgatherv, Args{Rank: 0, Size: 3, Src: Buf{Count: 2}, Dst: v},
			bufs{BufLayout{Use: Use{Own, In}, Elems: 2, Count: 2}, BufLayout{Use: Use{V, Out}, Elems: 7, Counts: v.Counts, Displs: v.Displs}}, -1},
		{"alltoallv", Alltoallv, Args{Rank: 0, Size: 3, Src: v, Dst: v},
			bufs{BufLayout{Use: Use{V, In}, Elems: 7, Counts: v.Counts, Displs: v.Displs}, BufLayout{Use: Use{V, Out}, Elems: 7, Counts: v.Counts, Displs: v.Displs}}, -1},
		{"bcast in place is plain", Bcast, Args{Rank: 0, Size: 2, InPlace: true, Src: Buf{Count: 9}},
			bufs{BufLayout{Use: Use{Block, In}, Elems: 9, Count: 9}, BufLayout{}}, 9},
		{"barrier", Barrier, Args{Rank: 0, Size: 2, Src: Buf{Count: -1}}, bufs{}, -1},
	} {
		l, err := tt.c.Layout(tt.a)
		require.NoError(t, err, tt.name)
		require.Equal(t, tt.want, bufs{l.Src, l.Dst}, tt.name)
		require.Equal(t, tt.block, l.Block, tt.name)
	}
}

// Every error names the argument a caller must fix.
func TestLayoutErrors(t *testing.T) {
	v := Buf{Counts: []int{2, 3}, Displs: []int{0, 2}}
	for _, tt := range []struct {
		c    Type
		a    Args
		want string
	}{
		{0, Args{Size: 1}, "Args.Type is not a valid collective (0)"},
		{Gather, Args{Size: 2, Root: 2}, "Args.Root is 2, want [0, 2)"},
		{Allreduce, Args{Size: 2, Rank: 2, Src: Buf{Count: 1}, Dst: Buf{Count: 1}}, "rank 2 of 2 is not a rank of the team"},
		{Allreduce, Args{Size: 2, Rank: -1, Src: Buf{Count: 1}, Dst: Buf{Count: 1}}, "rank -1 of 2 is not a rank of the team"},
		{Gather, Args{Size: 2, Src: Buf{Count: 3}, Dst: Buf{Count: 5}}, "Args.Dst.Count is 5 on the root, want team size × Args.Src.Count = 6"},
		{Gather, Args{Size: 2, InPlace: true, Dst: Buf{Count: 5}}, "Args.Dst.Count is 5 on the root, not a multiple of the team size 2"},
		{Allreduce, Args{Size: 2, Src: Buf{Count: 3}, Dst: Buf{Count: 4}}, "Args.Dst.Count is 4, want Args.Src.Count = 3"},
		{Alltoall, Args{Size: 2, Src: Buf{Count: 6}, Dst: Buf{Count: 4}}, "Args.Src.Count is 6, want Args.Dst.Count = 4"},
		{ReduceScatter, Args{Size: 2, Src: Buf{Count: 5}, Dst: Buf{Count: 2}}, "Args.Src.Count is 5, want team size × Args.Dst.Count = 4"},
		{Allgatherv, Args{Size: 2, Src: Buf{Count: 3}, Dst: v}, "Args.Src.Count is 3, Args.Dst.Counts[0] is 2: they must match"},
		{Allgatherv, Args{Size: 2, Src: Buf{Count: 2}, Dst: Buf{Counts: []int{1}}}, "Args.Dst.Counts and Displs need 2 entries (the team size), have 1 and 0"},
		{Alltoallv, Args{Size: 2, Src: Buf{Counts: []int{1, -1}, Displs: []int{0, 0}}, Dst: v}, "Args.Src.Counts[1] or Displs[1] is negative (-1, 0)"},
		{Bcast, Args{Size: 2, Src: Buf{Count: -1}}, "Args.Src.Count is negative (-1)"},
		{Bcast, Args{Size: 2, DTypeSize: 8, Src: Buf{Count: 1 << 61}}, "Args.Src.Count is 2305843009213693952: 8-byte elements exceed the 1099511627776 bytes a buffer may have (collective.MaxBytes)"},
		{Bcast, Args{Size: 2, DTypeSize: 1, Src: Buf{Count: MaxBytes + 1}}, "Args.Src.Count is 1099511627777: 1-byte elements exceed the 1099511627776 bytes a buffer may have (collective.MaxBytes)"},
		{Allgather, Args{Size: 4, DTypeSize: 1, Src: Buf{Count: 1 << 62}, Dst: Buf{Count: 0}},
			"Args.Src.Count is 4611686018427387904: 1-byte elements exceed the 1099511627776 bytes a buffer may have (collective.MaxBytes)"},
		{Allgather, Args{Size: 4, DTypeSize: 2, Src: Buf{Count: MaxBytes/8 + 1}, Dst: Buf{Count: MaxBytes / 2}},
			"Args.Src.Count is 137438953473: team size × Args.Src.Count (4 × 137438953473) of 2-byte elements exceeds the 1099511627776 bytes a buffer may have (collective.MaxBytes)"},
		{Gatherv, Args{Size: 2, Src: Buf{Count: 1}, Dst: Buf{Counts: []int{1, 1}, Displs: []int{0, MaxBytes}}},
			"Args.Dst.Displs[1] + Counts[1] is 1099511627776 + 1: 1-byte elements exceed the 1099511627776 bytes a buffer may have (collective.MaxBytes)"},
	} {
		_, err := tt.c.Layout(tt.a)
		require.EqualError(t, err, tt.want)
		require.ErrorIs(t, err, ErrInvalid)
	}
}

// A buffer of exactly MaxBytes is allowed: the limit is inclusive, for a plain count,
// a team's blocks, and a v-layout's last block.
func TestLayoutAtMaxBytes(t *testing.T) {
	for _, tt := range []struct {
		name      string
		c         Type
		a         Args
		src, dst  int // Elems
		elemBytes int
	}{
		{"bcast", Bcast, Args{Size: 2, DTypeSize: 1, Src: Buf{Count: MaxBytes}}, MaxBytes, 0, 1},
		{"allgather blocks", Allgather, Args{Size: 4, DTypeSize: 2, Src: Buf{Count: MaxBytes / 8}, Dst: Buf{Count: MaxBytes / 2}},
			MaxBytes / 8, MaxBytes / 2, 2},
		{"gatherv last block", Gatherv, Args{Size: 2, DTypeSize: 1, Src: Buf{Count: 1},
			Dst: Buf{Counts: []int{1, 1}, Displs: []int{0, MaxBytes - 1}}}, 1, MaxBytes, 1},
	} {
		l, err := tt.c.Layout(tt.a)
		require.NoError(t, err, tt.name)
		require.Equal(t, [2]int{tt.src, tt.dst}, [2]int{l.Src.Elems, l.Dst.Elems}, tt.name)
		require.Equal(t, MaxBytes, max(l.Src.Bytes(tt.elemBytes), l.Dst.Bytes(tt.elemBytes)), tt.name)
	}
}

func TestCheckOp(t *testing.T) {
	require.NoError(t, CheckOp(OpBxor, Uint16))
	require.ErrorContains(t, CheckOp(OpBxor, Float32), "Args.Op bxor is bitwise")
	require.ErrorContains(t, CheckOp(0, Float32), "Args.Op")
	require.ErrorContains(t, CheckOp(OpSum, 0), "Args.DType")
	for _, d := range DTypes() {
		got, err := ParseDType(d.String())
		require.NoError(t, err)
		require.Equal(t, d, got)
		require.NotZero(t, d.Size())
	}
	for _, o := range Ops() {
		got, err := ParseOp(o.String())
		require.NoError(t, err)
		require.Equal(t, o, got)
	}
}

// Describe answers nil for an invalid Type, and that nil's Side is a Side with no
// buffers, where it panicked.
func TestDescribeInvalid(t *testing.T) {
	d := Describe(Type(0))
	if d != nil {
		t.Fatalf("Describe(0) = %v, want nil", d)
	}
	if s := d.Side(0, 0); s == nil || *s != (Side{}) {
		t.Errorf("nil Desc's Side = %v, want a zero Side", s)
	}
}
