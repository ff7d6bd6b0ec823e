package coll

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
)

// ctlSink is an endpoint whose peers are all up and that drops coll's control
// messages; nothing else of it may be used.
type ctlSink struct{ driver.Endpoint }

func (ctlSink) SendCtl(int, []byte) error { return nil }
func (ctlSink) PeerDown(int) bool         { return false }

// TestNewsOfAFinishedPostFailsTheNext: in the default mode a rank that finished its
// part of post p keeps its success when the news that p failed elsewhere comes (or the
// failed rank leaves), but the failed rank never posts that request again, so the
// news must fail post p+1 at its Post (Request.Post fails a post at or past
// abort.future.Post at once). A later bound would leave p+1 waiting for a rank that
// never comes, until its deadline, and end it with a deadline error instead of a
// *PeerError naming the rank (TestProtoDefaultOutcomes meets this case only where no
// relay of the news comes after p+1 started).
func TestNewsOfAFinishedPostFailsTheNext(t *testing.T) {
	const seq, post, failed = 3, 4, 1
	newTeam := func() (*Team, *Request) {
		tm := &Team{size: 3, rank: 0, tl: ctlSink{}, msg: make([]byte, 256),
			left: map[int]uint64{}, leftWhy: map[int]string{}, reqs: map[uint64]*Request{}}
		tm.nextSeq.Store(seq + 1)
		r := &Request{t: tm, seq: seq, post: post, state: sDone, persistent: true} // default mode, a success
		tm.reqs[seq] = r
		return tm, r
	}
	check := func(what string, r *Request) {
		t.Helper()
		require.NoError(t, r.err, "%s: the finished post keeps its success", what)
		fa := r.abort.future
		require.NotNil(t, fa, "%s: nothing fails the next post", what)
		require.Equal(t, failed, fa.Rank, what)
		require.Equal(t, uint32(post+1), fa.Post, "%s: the first post the news fails", what)
	}

	_, r := newTeam()
	r.onAbort(failed, ctlMsg{kind: ctlAbort, seq: seq, post: post, origin: failed, cause: "copy-out failed"})
	check("an abort of the finished post", r)

	tm, r := newTeam()
	tm.peerLeft(failed, seq, true, "closed its team")
	check("the rank left the collective", r)
}
