package coll

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
)

// answerRec records the Answered calls of an endpoint (driver.Answerer); nothing else
// of the endpoint may be used.
type answerRec struct {
	driver.Endpoint
	calls [][3]uint64
}

func (a *answerRec) Answered(peer int, seq uint64, post uint32) {
	a.calls = append(a.calls, [3]uint64{uint64(peer), seq, uint64(post)})
}

// TestAnsweredOnlyWhenDead: coll tells the transport that a peer answered an abort
// only where this rank will move no more data for that collective, since the
// transport then stops counting the buffers it exposed to that peer for later posts
// (tlmlx5's RTRs sent ahead). A request that goes on (an all-or-nothing post agreed a
// success, and the answer is to a relay of stale news) tells nothing: its next post
// would otherwise miss data that its RTR sent ahead brought. A failing request, one
// that a failure's news will fail at its next post, and a closed collective tell.
func TestAnsweredOnlyWhenDead(t *testing.T) {
	rec := &answerRec{}
	tm := &Team{size: 2, rank: 0, tl: rec, left: map[int]uint64{}, leftWhy: map[int]string{}, reqs: map[uint64]*Request{}}
	tm.nextSeq.Store(4)
	r := &Request{t: tm, seq: 3, post: 4, state: sDone, agreed: true, persistent: true}
	tm.reqs[3] = r
	ack := ctlMsg{kind: ctlAbort, flags: flagAck, seq: 3, post: 4}
	r.onAbort(1, ack)
	require.Empty(t, rec.calls, "a request that goes on tells nothing")

	r.abort.future = &PeerError{Rank: 1, Seq: 3, Post: 5}
	r.onAbort(1, ack)
	require.Equal(t, [][3]uint64{{1, 3, 4}}, rec.calls, "news fails its next post: it tells")

	r.abort.future = nil
	r.state = sAborting
	r.onAbort(1, ack)
	require.Len(t, rec.calls, 2, "a failing request tells")

	delete(tm.reqs, 3)
	tm.route(1, ctlMsg{kind: ctlAbort, flags: flagAck, seq: 3, post: 4}, nil)
	require.Equal(t, [3]uint64{1, 3, 4}, rec.calls[2], "a closed collective tells")
	tm.route(1, ctlMsg{kind: ctlAbort, flags: flagLate, seq: 3, post: 4}, nil)
	require.Len(t, rec.calls, 3, "a no-vote is no answer")
}
