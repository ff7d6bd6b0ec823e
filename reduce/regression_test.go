package reduce_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/reduce"
)

// Integer avg divides by the team size in 64 bits: the size need not fit
// the element type (256 as an int8 is 0; 200 is negative).
func TestRegressionFinalizeAvgWideTeams(t *testing.T) {
	for _, c := range []struct {
		dt   collective.DType
		n    int
		in   int64
		want int64
	}{{collective.Int8, 128, 100, 0}, {collective.Int8, 200, -100, 0}, {collective.Uint8, 256, 255, 0}, {collective.Int8, 3, -100, -33},
		{collective.Int16, 65536, 30000, 0}, {collective.Uint16, 1000, 65000, 65}, {collective.Int64, 7, -700, -100}} {
		b := make([]byte, c.dt.Size())
		for i := range b {
			b[i] = byte(c.in >> (8 * i))
		}
		require.NoError(t, reduce.Finalize(b, c.dt, collective.OpAvg, c.n), "%v n=%d", c.dt, c.n)
		var got int64
		for i := len(b) - 1; i >= 0; i-- {
			got = got<<8 | int64(b[i])
		}
		if c.dt == collective.Int8 || c.dt == collective.Int16 || c.dt == collective.Int64 {
			shift := 64 - 8*len(b)
			got = got << shift >> shift
		}
		require.Equal(t, c.want, got, "%v avg of %d over %d ranks", c.dt, c.in, c.n)
	}
}

// Unsigned avg divides as unsigned: a uint64 sum with its top bit set is no negative
// number (read as an int64, it would divide to a wrong, sign-extended quotient), on
// short buffers and on ones past the kernels' threshold, through Finalize and through
// ReferenceFinalize.
func TestFinalizeAvgUint64TopBit(t *testing.T) {
	rng := testutil.Rand(t)
	for _, elems := range []int{3, 100} {
		for _, n := range []int{2, 3, 7, 1000} {
			in := make([]uint64, elems)
			b := make([]byte, 8*elems)
			for i := range in {
				in[i] = rng.Uint64() | 1<<63
				binary.LittleEndian.PutUint64(b[8*i:], in[i])
			}
			ref := append([]byte(nil), b...)
			require.NoError(t, reduce.Finalize(b, collective.Uint64, collective.OpAvg, n))
			require.NoError(t, reduce.ReferenceFinalize(ref, collective.Uint64, collective.OpAvg, n))
			for i, v := range in {
				require.Equal(t, v/uint64(n), binary.LittleEndian.Uint64(b[8*i:]), "Finalize: %d elements, %d / %d", elems, v, n)
				require.Equal(t, v/uint64(n), binary.LittleEndian.Uint64(ref[8*i:]), "ReferenceFinalize: %d elements, %d / %d", elems, v, n)
			}
		}
	}
}

// binary16 subnormals are man × 2^-24; they were decoded at half their value, so a
// float16 sum of two smallest subnormals gave the smallest subnormal (found by the
// soak's independent reference).
func TestRegressionF16Subnormals(t *testing.T) {
	for man := uint16(1); man < 0x400; man++ {
		for _, sign := range []uint16{0, 0x8000} {
			want := float32(man) * 0x1p-24
			if sign != 0 {
				want = -want
			}
			require.Equal(t, want, reduce.F16ToF32(sign|man), "binary16 %#04x", sign|man)
			require.Equal(t, sign|man, reduce.F32ToF16(want), "binary16 of %v", want)
		}
	}
	dst, src := []byte{0x01, 0x00, 0xff, 0x01}, []byte{0x01, 0x00, 0x01, 0x02}
	require.NoError(t, reduce.Into(dst, src, collective.Float16, collective.OpSum))
	require.Equal(t, []byte{0x02, 0x00, 0x00, 0x04}, dst, "0x0001+0x0001 and 0x01ff+0x0201 in binary16")
}
