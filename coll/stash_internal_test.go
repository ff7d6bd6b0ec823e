package coll

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
)

// sendRec records the control messages an endpoint sends, decoded; no peer is down.
// Nothing else of the endpoint may be used.
type sendRec struct {
	driver.Endpoint
	size int
	sent []sentCtl
}

type sentCtl struct {
	peer int
	m    ctlMsg
}

func (s *sendRec) SendCtl(peer int, b []byte) error {
	m, err := decodeCtl(b, s.size, "")
	if err != nil {
		return err
	}
	s.sent = append(s.sent, sentCtl{peer, m})
	return nil
}

func (s *sendRec) PeerDown(int) bool { return false }

// answers are the peers that rec's messages since from answer about (seq, post): an
// abort of it that is not a no-vote.
func (s *sendRec) answers(from int, seq uint64, post uint32) map[int]bool {
	got := map[int]bool{}
	for _, c := range s.sent[from:] {
		if c.m.kind == ctlAbort && c.m.flags&flagLate == 0 && c.m.seq == seq && c.m.post == post {
			got[c.peer] = true
		}
	}
	return got
}

// TestStashAnswers: a rank that has not initialized collective k answers every abort
// of k that reaches it, the sender's of each, by the flood that went out or by an
// acknowledgement (TestRegressionUninitializedAnswers is the end-to-end case). Rank 1
// of 3, whose overlay neighbour is rank 0 alone: a plain abort from rank 2 is
// flooded to rank 0 and acknowledged to rank 2; a mismatch's abort from rank 2 after
// a plain one from rank 0 is flooded nowhere (post 1's news went out), and still
// answered (found in review: the first version read the mismatch flag of the
// message, took the flood for one that reached every rank, and sent nothing).
func TestStashAnswers(t *testing.T) {
	newTeam := func() (*Team, *sendRec) {
		rec := &sendRec{size: 3}
		tm := &Team{size: 3, rank: 1, tl: rec, msg: make([]byte, 4096), left: map[int]uint64{}, leftWhy: map[int]string{},
			reqs: map[uint64]*Request{}, pending: map[uint64]*pendingSeq{}}
		tm.nextSeq.Store(5)
		return tm, rec
	}
	abort := func(origin int, flags ctlFlags) ctlMsg {
		return ctlMsg{kind: ctlAbort, flags: flags, seq: 5, post: 1, origin: uint32(origin), cause: "boom"}
	}

	tm, rec := newTeam()
	m := abort(2, 0)
	tm.route(2, m, m.encode(make([]byte, 4096)))
	require.Equal(t, map[int]bool{0: true, 2: true}, rec.answers(0, 5, 1), "flooded to rank 0, acknowledged to rank 2")

	tm, rec = newTeam()
	m = abort(0, 0)
	tm.route(0, m, m.encode(make([]byte, 4096)))
	require.Equal(t, map[int]bool{0: true}, rec.answers(0, 5, 1), "the flood answers rank 0")
	n := len(rec.sent)
	m = abort(2, flagMismatch)
	tm.route(2, m, m.encode(make([]byte, 4096)))
	require.Equal(t, map[int]bool{2: true}, rec.answers(n, 5, 1), "rank 2's mismatch is answered")

	tm, rec = newTeam()
	m = abort(2, flagMismatch)
	tm.route(2, m, m.encode(make([]byte, 4096)))
	require.Equal(t, map[int]bool{0: true, 2: true}, rec.answers(0, 5, 1), "a mismatch's flood goes to every rank")
	n = len(rec.sent)
	m = abort(0, 0)
	tm.route(0, m, m.encode(make([]byte, 4096)))
	require.Empty(t, rec.answers(n, 5, 1), "what went out answered rank 0 already")
	require.Len(t, tm.pending[5].msgs, 2, "both kept for Init")
}
