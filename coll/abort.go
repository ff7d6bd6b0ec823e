package coll

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ibcoll/ibcoll/coll/driver"
)

// abortState is the failure protocol of one request. A rank whose post fails tells
// its peers (ctlAbort) over a sparse graph, the overlay tree of the team plus the
// peers of the collective's task; every rank forwards the news once over its own
// such graph, so it reaches every rank without every rank messaging every other, and
// every rank that can still write into the failing rank's buffers (a peer of its
// task: nothing else writes there) hears it directly. The failing rank waits until
// each peer that can still write into its memory (driver.Task.Writers) has answered
// (RC ordering puts the answer after the peer's last write) or is down; a peer silent
// past AbortGrace is cut off, which breaks the team.
//
// The news "post p of collective seq failed" fails every post p or later: a rank
// whose post fails never posts that request again, so no later post can succeed
// without it. Where outcomes are all-or-nothing no rank ever gets past a failed
// post; in the default mode a rank may have finished p (and posted p+1) when the
// news comes: p+1 then fails, and a finished p stays a success.
type abortState struct {
	err   error     // why the post in flight fails
	grace time.Time // when the silent peers get cut off
	// acks, per rank (made at the first answer): the earliest post that an abort or
	// acknowledgement from it named, 0 for none. Either says that the rank writes
	// nothing more into this rank's buffers for that post or a later one.
	acks    []uint32
	future  *PeerError
	told    uint32 // the earliest post this rank told its peers failed (0: none)
	toldAll bool   // that news went to every rank (a mismatch's)
	writers []int  // scratch for the task's Writers
	// drainCut: the task's peers were cut off for work outstanding past abortDrain.
	drainCut bool
}

// tell reports whether the news that post failed (a mismatch's if all) must still go
// out, and notes that it does: news of an earlier post already fails this one.
func (a *abortState) tell(post uint32, all bool) bool {
	if a.told != 0 && a.told <= post {
		return false
	}
	a.told, a.toldAll = post, all
	return true
}

// heard notes that peer named post in an abort or acknowledgement.
func (r *Request) heard(peer int, post uint32) {
	a := &r.abort
	if a.acks == nil {
		a.acks = make([]uint32, r.t.size)
	}
	if post != 0 && (a.acks[peer] == 0 || post < a.acks[peer]) {
		a.acks[peer] = post
	}
}

// dead reports whether this request will move no more data: its post failed (or is
// failing), or the news of a failure fails its next post.
func (r *Request) dead() bool {
	return r.state == sAborting || r.state == sDone && r.err != nil || r.abort.future != nil
}

// answered tells the transport that peer heard of the failure of post of collective
// seq (driver.Answerer).
func (t *Team) answered(peer int, seq uint64, post uint32) {
	if a, ok := t.tl.(driver.Answerer); ok {
		a.Answered(peer, seq, post)
	}
}

// quiet reports whether peer can no longer write into this rank's buffers for the
// post in flight: it answered the abort, its link is down, or it closed its team.
func (r *Request) quiet(peer int) bool {
	if a := r.abort.acks; a != nil && a[peer] != 0 && a[peer] <= r.post {
		return true
	}
	if _, closed := r.t.left[peer]; closed {
		return true
	}
	return r.t.gone(peer, r.seq)
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
	r.abort.drainCut = false
	if r.abort.tell(r.post, errors.Is(err, ErrMismatch)) {
		var pe *PeerError
		if errors.As(err, &pe) {
			t.flood(r.seq, r.post, pe.Rank, pe.Cause, failFlags(pe))
		} else {
			t.flood(r.seq, r.post, t.rank, err.Error(), failFlags(err))
		}
	}
	r.advance(new(clock))
}

// advanceAbort ends the abort once nothing can arrive any more, and cuts off the peers
// still silent past the grace.
func (r *Request) advanceAbort(now time.Time) {
	t := r.t
	if r.quiesced() {
		r.finish(r.abort.err)
		return
	}
	if now.Before(r.abort.grace) || t.linking(r.writers(), r.quiet) {
		return
	}
	var late []string
	for _, p := range r.writers() {
		if !r.quiet(p) {
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
		return
	}
	if now.Sub(r.abort.grace) > abortDrain && !r.abort.drainCut {
		// The transport still holds work of the post: fence every peer of it.
		r.abort.drainCut = true
		waiting := r.task.Waiting()
		for _, p := range r.task.Peers() {
			t.tl.CutOff(p, fmt.Sprintf("work of %s #%d still outstanding %v past the abort's grace", r.typ, r.seq, abortDrain))
		}
		t.setBroken(fmt.Errorf("%s #%d: the transport did not finish the failed post within %v of its grace (waiting for %s); its peers were cut off",
			r.typ, r.seq, abortDrain, waiting))
	}
}

// quiesced reports whether nothing of the failed post can still arrive or leave: the
// transport has nothing outstanding, and every peer of the task acknowledged the
// abort or is down.
func (r *Request) quiesced() bool {
	if r.task != nil && !r.task.Quiesced() {
		return false
	}
	for _, p := range r.writers() {
		if !r.quiet(p) {
			return false
		}
	}
	return true
}

// writers are the peers that can still write into this rank's memory for the post in
// flight (driver.Task.Writers).
//
// A mismatch is the exception: the ranks built different graphs, so a peer that this
// rank exposed a buffer to may not count this rank among its own peers, hear the
// news from it directly, or wait for it. Such a post waits for every rank, as every
// rank of it does (they all fail it, and a mismatch's news goes to every rank), so
// none of them goes idle while another still waits for its answer.
func (r *Request) writers() []int {
	w := r.abort.writers[:0]
	switch {
	case errors.Is(r.abort.err, ErrMismatch):
		for p := 0; p < r.t.size; p++ {
			if p != r.t.rank {
				w = append(w, p)
			}
		}
	case r.task != nil:
		w = r.task.Writers(w)
	}
	r.abort.writers = w
	return w
}

// onAbort handles an abort (or its acknowledgement, or a child's no-vote) of post
// m.post from peer.
func (r *Request) onAbort(peer int, m ctlMsg) {
	t, a := r.t, &r.abort
	if m.flags&flagLate != 0 {
		r.onNoVote(m)
		return
	}
	r.heard(peer, m.post)
	// Told only once this request is dead here: stale news of a post all ranks agreed
	// on (and the answers to its relay) leaves it running, with its RTRs sent ahead.
	defer func() {
		if r.dead() {
			t.answered(peer, r.seq, m.post)
		}
	}()
	if m.flags&flagAck != 0 {
		return
	}
	pe := &PeerError{Rank: int(m.origin), Seq: r.seq, Post: m.post, Cause: m.cause,
		Broken: m.flags&flagBroken != 0, Mismatch: m.flags&flagMismatch != 0}
	switch {
	case r.agreed && (m.post < r.post || r.state == sDone && m.post == r.post):
		// This rank moved on, or finished that post: nothing more of it will come
		// from here (the answer below says so).
	case m.post > r.post || r.state == sInit:
		// A post this rank has not reached: it fails at once when posted, before it
		// could write anything, so the answer below is already true.
		if a.future == nil || m.post < a.future.Post {
			a.future = pe
		}
	case int(m.origin) == t.rank && r.agree.lateErr != nil:
		r.fail(r.agree.lateErr) // this rank's own no-vote, decided by the root
	case r.state == sDone:
		// The default mode: this rank finished its part of a post the news covers
		// before the news came; it stays a success, but origin takes part in no
		// later post.
		if r.err == nil {
			next := *pe
			next.Post = r.post + 1
			if a.future == nil || next.Post < a.future.Post {
				a.future = &next
			}
		}
	default:
		pe.Post = r.post
		r.fail(pe)
	}
	if a.tell(m.post, pe.Mismatch) {
		t.flood(r.seq, m.post, int(m.origin), m.cause, failFlags(pe))
	}
	// What this rank flooded (now or before) reached peer and answers it, if it
	// named this post or an earlier one; otherwise an acknowledgement does.
	if a.told == 0 || a.told > m.post || !t.floodReaches(peer, r.seq, a.toldAll) {
		t.ack(peer, m)
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
		if r.abort.tell(m.post, false) {
			r.t.flood(r.seq, m.post, pe.Rank, pe.Cause, 0)
		}
	}
}
