package reduce_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/reduce"
)

// TestReferenceOneSourceCopies: Reference of one source is a copy, as IntoMany's,
// for the halves too, whose round trip through float32 quieted a signalling NaN (a
// review found it). Fresh random elements behind a signalling NaN in each.
func TestReferenceOneSourceCopies(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, dt := range []collective.DType{collective.Float16, collective.BFloat16} {
		src := make([]byte, 2*(2+rnd.IntN(64)))
		testutil.Fill(rnd, src)
		if dt == collective.Float16 {
			src[0], src[1] = 0x01, 0x7c // signalling NaN
		} else {
			src[0], src[1] = 0x81, 0x7f
		}
		got, want := make([]byte, len(src)), make([]byte, len(src))
		require.NoError(t, reduce.IntoMany(want, [][]byte{src}, dt, collective.OpSum))
		require.NoError(t, reduce.Reference(got, [][]byte{src}, dt, collective.OpSum))
		require.Equal(t, src, want, "%v: IntoMany of one source", dt)
		require.Equal(t, want, got, "%v: Reference of one source", dt)
	}
}

// TestFinalizeChecksWhateverTheOp: Finalize and ReferenceFinalize refuse a team of
// fewer than one rank and a dst that is not whole elements whatever the op, team size
// and length (they were refused only for an avg over more than one rank of a non-empty
// dst: a review found it).
func TestFinalizeChecksWhateverTheOp(t *testing.T) {
	buf := make([]byte, 8)
	for _, fn := range []func([]byte, collective.DType, collective.Op, int) error{reduce.Finalize, reduce.ReferenceFinalize} {
		require.Error(t, fn(buf[:6], collective.Int32, collective.OpAvg, 2))
		require.Error(t, fn(buf[:6], collective.Int32, collective.OpAvg, 1), "ragged dst, avg over 1")
		require.Error(t, fn(buf[:6], collective.Int32, collective.OpSum, 2), "ragged dst, sum")
		require.Error(t, fn(buf[:0], collective.Int32, collective.OpAvg, 0), "avg over 0 ranks")
		require.Error(t, fn(nil, collective.Float32, collective.OpAvg, -5), "avg over -5 ranks")
		require.NoError(t, fn(buf, collective.Int32, collective.OpSum, 3))
		require.NoError(t, fn(buf[:0], collective.Int32, collective.OpAvg, 3))
	}
}
