package tlmlx5

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/verbs"
)

// FuzzLazyMessage drives what a peer may send through the team's Messenger (the lazy
// connect's hellos, refusals and closed notices, or anything else) into rank 0 of a
// 3-rank team, from any claimed sender, before and while rank 0 links to its peers
// with control messages. Nothing may panic, and nothing may hang: every peer of rank 0
// ends up with its message or down (a forged hello that sends the link astray fails it
// at the connect bound, shortened here). The team then closes cleanly.
func FuzzLazyMessage(f *testing.F) {
	info, _ := (&verbs.QPInfo{QPN: 7, PSN: 1, LID: 1, Port: 1, MTU: 1024}).MarshalBinary()
	f.Add(uint8(1), false, append([]byte{msgHello, 0}, info...))
	f.Add(uint8(2), true, append([]byte{msgHello, helloRTR}, info...))
	f.Add(uint8(1), true, append([]byte{msgRefuse, 0}, "no"...))
	f.Add(uint8(2), false, binary.LittleEndian.AppendUint64([]byte{msgClosed, 0}, 3))
	f.Add(uint8(1), true, []byte{msgClosed, 0, 1})
	f.Add(uint8(2), true, append(binary.LittleEndian.AppendUint64([]byte{msgClosed, 0}, 0), "coll: team broken: why"...))
	f.Add(uint8(0), false, []byte{msgHello})
	f.Add(uint8(9), false, []byte{0xff, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, from uint8, late bool, msg []byte) {
		old := connectBound
		connectBound = 50 * time.Millisecond
		defer func() { connectBound = old }()
		ft := newFakeTeam(t, 3, nil)
		src := int(from%5) - 1 // -1..3: out of range, self, peers, out of range
		forge := func() { ft.eps[0].(driver.Lazy).Message(src, msg) }
		if !late {
			forge()
		}
		for p := 1; p < 3; p++ {
			_ = ft.eps[0].SendCtl(p, []byte{byte(p)}) // fails where the forgery took the peer down
		}
		if late {
			forge()
		}
		done := func() bool {
			for p := 1; p < 3; p++ {
				if len(ft.hs[p].from[0]) == 0 && !ft.eps[0].PeerDown(p) {
					return false
				}
			}
			return true
		}
		require.True(t, ft.pollUntil(t, pollTimeout, done), "a peer of rank 0 neither got its message nor went down after message %x from %d", msg, src)
		for p := 1; p < 3; p++ {
			if got := ft.hs[p].from[0]; len(got) > 0 {
				require.Equal(t, [][]byte{{byte(p)}}, got, "rank %d got what rank 0 sent, once", p)
			}
		}
	})
}
