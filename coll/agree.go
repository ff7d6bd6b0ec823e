package coll

import (
	"fmt"
	"strings"
	"time"
)

// agreement is the completion vote of one request: a post succeeds only when every
// rank finished it, so that a failure anywhere (a late copy-out included) fails it
// everywhere. Ranks report done up a k-nomial tree (ctlDone, with the collective's
// signature, which catches ranks that initialized different collectives); the root
// decides and the decision comes back down (ctlFin).
type agreement struct {
	parent   int      // -1 at the root
	children []int    // nearest first
	doneFrom []uint32 // per child: the last post it reported done
	finFor   uint32   // the last post the parent decided
	sentDone bool     // this rank reported the post in flight done
	// decideBy bounds how long a deadline that passed after this rank said done
	// waits for the decision.
	decideBy time.Time
}

func newAgreement(parent int, children []int) agreement {
	return agreement{parent: parent, children: children, doneFrom: make([]uint32, len(children))}
}

// start resets the per-post state.
func (a *agreement) start() {
	a.sentDone = false
	a.decideBy = time.Time{}
}

func (a *agreement) childDone(peer int, post uint32) {
	for i, c := range a.children {
		if c == peer && post > a.doneFrom[i] {
			a.doneFrom[i] = post
		}
	}
}

func (a *agreement) fin(post uint32) { a.finFor = max(a.finFor, post) }

// subtreeDone reports whether every child reported post done.
func (a *agreement) subtreeDone(post uint32) bool {
	for _, d := range a.doneFrom {
		if d < post {
			return false
		}
	}
	return true
}

// waiting says what the vote on post waits for, for timeout messages.
func (a *agreement) waiting(post uint32) string {
	var miss []string
	for i, c := range a.children {
		if a.doneFrom[i] < post {
			miss = append(miss, fmt.Sprint(c))
		}
	}
	if len(miss) > 0 {
		return ": waiting for completion from rank(s) " + strings.Join(miss, ",")
	}
	if a.parent >= 0 {
		return fmt.Sprintf(": waiting for the final agreement from rank %d", a.parent)
	}
	return ""
}

// vote moves the agreement of the post in flight along: report done once the subtree
// is, finish once the decision came (at the root: once the subtree is done).
func (r *Request) vote() {
	a, t := &r.agree, r.t
	if !a.sentDone {
		if !a.subtreeDone(r.post) {
			return
		}
		if a.parent < 0 {
			r.succeed()
			return
		}
		a.sentDone = true
		t.send(a.parent, ctlMsg{kind: ctlDone, seq: r.seq, post: r.post, origin: uint32(t.rank), sig: r.sig})
	}
	if a.finFor >= r.post {
		r.succeed()
	}
}

// succeed passes the decision down and ends the post.
func (r *Request) succeed() {
	t := r.t
	for _, c := range r.agree.children {
		t.send(c, ctlMsg{kind: ctlFin, seq: r.seq, post: r.post, origin: uint32(t.rank), sig: r.sig})
	}
	r.finish(nil)
}

// lateDecision reports whether a deadline that passed after this rank said done must
// still wait for the decision. Having said done, this rank may already have succeeded
// everywhere else: failing it alone would give the ranks different outcomes. The
// decision (or an abort) comes within AbortGrace unless the peers are gone.
func (r *Request) lateDecision(now time.Time) bool {
	a := &r.agree
	if r.state != sAgree || !a.sentDone {
		return false
	}
	if a.decideBy.IsZero() {
		a.decideBy = now.Add(r.t.cfg.AbortGrace)
	}
	return now.Before(a.decideBy)
}
