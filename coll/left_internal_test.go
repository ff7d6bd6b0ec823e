package coll

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPeerLeftKeepsItsBound: a peer's own left message says from which collective on it
// is gone; later news without a collective (its mailbox refused a message, a send to it
// failed) does not move that bound back to 0, which would fail a collective in flight
// that the peer had already done its part of. A more precise bound still wins, and news
// without one about a peer not known to have left still counts from 0.
func TestPeerLeftKeepsItsBound(t *testing.T) {
	tm := &Team{left: map[int]uint64{}, leftWhy: map[int]string{}, reqs: map[uint64]*Request{}}
	tm.peerLeft(1, 10, true, "rank 1 closed its team")
	tm.peerLeft(1, 0, false, "rank 1's mailbox is closed")
	require.Equal(t, uint64(10), tm.left[1], "news without a collective kept the bound")
	require.Equal(t, "rank 1 closed its team", tm.leftWhy[1])
	tm.peerLeft(1, 7, true, "an earlier bound")
	require.Equal(t, uint64(7), tm.left[1], "an earlier bound wins")
	tm.peerLeft(2, 0, false, "rank 2's mailbox is closed")
	require.Equal(t, uint64(0), tm.left[2])
}

// TestPeerLeftSparesReportedDone: a post that reported done in the completion
// agreement waits for the root's decision when news that a peer closed its team comes
// without a bound: the root may have decided success with that peer's vote. (Exact
// news, a left message from that collective or earlier, still fails it:
// TestProtoTeamClosedMidSequence.) The hour soak
// (AllOrNothing, n=13) saw rank 8 fail such a reduce when rank 6's mailbox refused a
// hello after rank 6 succeeded and closed, while the 12 other ranks succeeded.
func TestPeerLeftSparesReportedDone(t *testing.T) {
	tm := &Team{left: map[int]uint64{}, leftWhy: map[int]string{}, reqs: map[uint64]*Request{}}
	r := &Request{t: tm, seq: 0, post: 1, state: sAgree, agreed: true, agree: newAgreement(5, nil, nil)}
	r.agree.sentDone = true
	tm.reqs[0] = r
	require.NotPanics(t, func() { tm.peerLeft(6, 0, false, "rank 6's mailbox is closed") }, "peerLeft failed the post (a failure floods)")
	require.Equal(t, sAgree, r.state, "the post still waits for the decision")
	require.Nil(t, r.abort.err)
	require.Equal(t, uint64(0), tm.left[6], "the peer counts as gone")
}
