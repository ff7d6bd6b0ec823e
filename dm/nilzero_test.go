package dm_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestNilAndZeroChunk: every method of a nil Chunk and of a zero one (no pool made
// it) answers without a panic: the getters with zero values, Close with nil for nil
// (nil-safe, as the package says) and an error naming the zero Chunk, the copies with
// errors. (The getters and a zero Chunk's Close dereferenced its pool: found by a
// review.)
func TestNilAndZeroChunk(t *testing.T) {
	var nilc *dm.Chunk
	for _, c := range []*dm.Chunk{nilc, {}} {
		require.NotPanics(t, func() {
			require.Zero(t, c.Offset())
			require.Zero(t, c.Len())
			require.Zero(t, c.Addr())
			require.Zero(t, c.LKey())
			require.Zero(t, c.RKey())
			require.Nil(t, c.Pool())
			require.Error(t, c.CopyTo(0, []byte{1}))
			require.Error(t, c.CopyFrom(make([]byte, 1), 0))
		})
	}
	require.NoError(t, nilc.Close())
	err := (&dm.Chunk{}).Close()
	require.ErrorIs(t, err, verbs.ErrInvalid)
	require.ErrorContains(t, err, "zero Chunk")
}
