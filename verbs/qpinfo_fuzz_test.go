package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/verbs"
)

// FuzzQPInfoUnmarshal: a QP info comes from another process; any bytes either fail
// with ErrInvalid or decode to an info that encodes back to the same bytes.
func FuzzQPInfoUnmarshal(f *testing.F) {
	good, _ := verbs.QPInfo{LID: 7, GID: [16]byte{0xfe, 0x80, 15: 1}, QPN: 0x123456, PSN: 99, Port: 1, GIDIndex: 3,
		MTU: 4096, DeviceGUID: 0xdeadbeef}.MarshalBinary()
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append([]byte{2}, good[1:]...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var q verbs.QPInfo
		if err := q.UnmarshalBinary(b); err != nil {
			require.ErrorIs(t, err, verbs.ErrInvalid)
			return
		}
		out, err := q.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, b, out)
	})
}
