package tlmlx5

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWRID(t *testing.T) {
	for _, c := range []struct {
		id         wrID
		kind       wrKind
		who, index int
	}{
		{recvID(0, 0), wrRecv, 0, 0},
		{recvID(maxWRPeer, 31), wrRecv, maxWRPeer, 31},
		{ctlID(7, 63), wrCtl, 7, 63},
		{dataID(maxTaskID, 1<<31), wrData, maxTaskID, 1 << 31},
	} {
		require.Equal(t, c.kind, c.id.kind())
		require.Equal(t, c.index, c.id.index())
		if c.kind == wrData {
			require.Equal(t, uint32(c.who), c.id.task())
		} else {
			require.Equal(t, c.who, c.id.peer())
		}
	}
}

func TestImm(t *testing.T) {
	for _, partial := range []bool{false, true} {
		for _, tag := range []int{0, 1, 0x7ffe, maxTag} {
			seq, post, gotTag, gotPartial := splitImm(makeImm(0x12345, 7, tag, partial))
			require.Equal(t, uint16(0x12345%SeqWindow), seq)
			require.Equal(t, uint32(7%(1<<postBits)), post)
			require.Equal(t, tag, gotTag)
			require.Equal(t, partial, gotPartial)
		}
	}
}

func TestRTRRoundTrip(t *testing.T) {
	m := rtr{peer: 3, seq: 1 << 40, post: 9, tag: maxTag, addr: 0xdead0000beef, rkey: 77, n: 1 << 33, sig: 5, root: 2}
	got, err := decodeRTR(3, m.encode(make([]byte, slotSize)))
	require.NoError(t, err)
	require.Equal(t, m, got)
	_, err = decodeRTR(3, m.encode(make([]byte, slotSize))[:rtrLen-1])
	require.ErrorIs(t, err, errBadWire)
}

// FuzzDecodeRTR: peer bytes never crash the decoder, and what decodes round-trips.
func FuzzDecodeRTR(f *testing.F) {
	f.Add((&rtr{seq: 1, post: 2, tag: 3, addr: 4, rkey: 5, n: 6, sig: 7, root: noRoot}).encode(make([]byte, slotSize)))
	f.Add((&rtr{seq: 1, post: 2, tag: 3, addr: 4, rkey: 5, n: 6, sig: 7, root: 5}).encode(make([]byte, slotSize)))
	f.Add([]byte{slotRTR})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeRTR(1, b)
		if err != nil {
			return
		}
		m2, err := decodeRTR(1, m.encode(make([]byte, rtrLen)))
		require.NoError(t, err)
		require.Equal(t, m, m2)
	})
}
