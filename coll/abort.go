package coll

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// abortState is the failure protocol of one request. A rank whose post fails tells
// every peer (ctlAbort; each rank forwards the news once, so it arrives even with a
// link down) and waits until no peer can still write into its buffers: every peer
// acknowledged (RC ordering puts the acknowledgement after its last write) or is down.
// A peer silent past AbortGrace is cut off, which breaks the team.
type abortState struct {
	err     error     // why the post in flight fails
	grace   time.Time // when the silent peers get cut off
	acks    []uint32  // per rank: the last post it acknowledged as failed
	future  *PeerError
	flooded uint32 // the last post this rank told its peers about
}

// wakeAt is when an abort must be looked at again.
func (a *abortState) wakeAt() time.Time {
	// Past the grace the abort waits only for the transport to drain (cut-off peers'
	// requests flushing): look again now and then rather than spinning on a time
	// already gone.
	if now := time.Now(); !a.grace.After(now) {
		return now.Add(10 * time.Millisecond)
	}
	return a.grace
}

// fail ends the post in flight with err (a local failure, or a *PeerError), tells the
// peers and starts waiting for their acknowledgements.
func (r *Request) fail(err error) {
	switch r.state {
	case sDone, sAborting, sInit:
		return
	}
	t := r.t
	r.abort.err = err
	if r.stageInFlight {
		r.stageInFlight = false
		_ = r.stage.Complete(err)
	}
	if r.task != nil {
		r.task.Abort()
	}
	r.state = sAborting
	r.abort.grace = time.Now().Add(t.cfg.AbortGrace)
	if r.abort.flooded != r.post {
		// flooded may be a later post (a peer's failure of it, relayed): this post's
		// failure must still go out.
		r.abort.flooded = max(r.abort.flooded, r.post)
		var pe *PeerError
		if errors.As(err, &pe) {
			t.flood(r.seq, r.post, pe.Rank, pe.Cause, failFlags(pe))
		} else {
			t.flood(r.seq, r.post, t.rank, err.Error(), failFlags(err))
		}
	}
	r.advance(time.Now())
}

// advanceAbort ends the abort once nothing can arrive any more, and cuts off the peers
// still silent past the grace.
func (r *Request) advanceAbort(now time.Time) {
	t := r.t
	if r.quiesced() {
		r.finish(r.abort.err)
		return
	}
	if now.Before(r.abort.grace) || t.linking(r.seq, r.post, r.abort.acks) {
		return
	}
	var late []string
	for p := 0; p < t.size; p++ {
		if p != t.rank && r.abort.acks[p] < r.post && !t.gone(p, r.seq) {
			late = append(late, fmt.Sprint(p))
			t.tl.CutOff(p, fmt.Sprintf("rank %d did not acknowledge the abort of %s #%d within %v", p, r.typ, r.seq, t.cfg.AbortGrace))
		}
	}
	if len(late) > 0 {
		t.setBroken(fmt.Errorf("rank(s) %s did not acknowledge the abort of %s #%d within %v and were cut off",
			strings.Join(late, ","), r.typ, r.seq, t.cfg.AbortGrace))
	}
	if r.task == nil || r.task.Quiesced() {
		r.finish(errors.Join(r.abort.err, t.broken))
	}
}

// quiesced reports whether nothing of the failed post can still arrive or leave: the
// transport has nothing outstanding, and every peer acknowledged the abort or is down.
func (r *Request) quiesced() bool {
	if r.task != nil && !r.task.Quiesced() {
		return false
	}
	t := r.t
	for p := 0; p < t.size; p++ {
		if p != t.rank && r.abort.acks[p] < r.post && !t.gone(p, r.seq) {
			return false
		}
	}
	return true
}

// onAbort handles an abort (or its acknowledgement, or a child's no-vote) of post
// m.post from peer.
func (r *Request) onAbort(peer int, m ctlMsg) {
	t, a := r.t, &r.abort
	if m.flags&flagLate != 0 {
		r.onNoVote(m)
		return
	}
	a.acks[peer] = max(a.acks[peer], m.post)
	pe := &PeerError{Rank: int(m.origin), Seq: r.seq, Post: m.post, Cause: m.cause,
		Broken: m.flags&flagBroken != 0, Mismatch: m.flags&flagMismatch != 0}
	switch {
	case m.post < r.post || r.state == sDone && m.post == r.post:
		// This rank moved on, or finished that post: nothing more of it will come
		// from here. Say so, or the sender cuts this rank off after its grace.
		if m.flags&flagAck == 0 {
			t.ack(peer, m)
		}
		return
	case m.post > r.post || r.state == sInit:
		if a.future == nil || m.post < a.future.Post {
			a.future = pe
		}
	case int(m.origin) == t.rank && r.agree.lateErr != nil:
		r.fail(r.agree.lateErr) // this rank's own no-vote, decided by the root
		return
	default:
		r.fail(pe)
		return
	}
	if m.post > a.flooded {
		a.flooded = m.post
		t.flood(r.seq, m.post, int(m.origin), m.cause, failFlags(pe))
	}
}

// onNoVote handles a child's no-vote for post m.post: it fails the post where this rank
// has not voted yet (the root cannot have decided success without this rank's vote),
// and is passed up where it has; a post already finished here needs nothing (its
// decision is on its way down).
func (r *Request) onNoVote(m ctlMsg) {
	switch {
	case m.post < r.post || m.post == r.post && r.state == sDone:
	case m.post == r.post && r.state == sAgree && r.agree.sentDone:
		r.voteNo(int(m.origin), m.cause)
	case m.post == r.post:
		r.fail(&PeerError{Rank: int(m.origin), Seq: r.seq, Post: m.post, Cause: m.cause})
	default:
		// A post this rank has not reached: it has not voted on it either.
		pe := &PeerError{Rank: int(m.origin), Seq: r.seq, Post: m.post, Cause: m.cause}
		if r.abort.future == nil || m.post < r.abort.future.Post {
			r.abort.future = pe
		}
		if m.post > r.abort.flooded {
			r.abort.flooded = m.post
			r.t.flood(r.seq, m.post, pe.Rank, pe.Cause, 0)
		}
	}
}
