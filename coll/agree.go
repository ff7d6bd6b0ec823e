package coll

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// agreement is the completion vote of one request: a post succeeds only when every
// rank finished it, so that a failure anywhere (a late copy-out included) fails it
// everywhere. Ranks report done up a k-nomial tree (ctlDone, with the collective's
// signature, which catches ranks that initialized different collectives); the root
// decides and the decision comes back down (ctlFin).
//
// Once a rank reported done, only the root decides: the rank's outcome is the
// decision coming down, or an abort. Its own deadline passing, a late no-vote from a
// child, or its team breaking are sent up (a no-vote, flagLate) or waited out, never
// turned into a local failure, which could differ from what the root decided. A
// decision that does not come within Config.Timeout after the rank's deadline, or
// whose path is gone, ends the post with ErrTeamBroken: the outcome elsewhere is
// unknown, and the team says so.
type agreement struct {
	parent   int      // -1 at the root
	children []int    // nearest first
	doneFrom []uint32 // per child: the last post it reported done
	finFor   uint32   // the last post the parent decided
	sentDone bool     // this rank reported the post in flight done
	sentLate bool     // this rank sent its parent a no-vote for the post in flight
	lateErr  error    // why this rank voted no: its error when the abort comes back
	// decideBy bounds how long a deadline that passed after this rank said done
	// waits for the decision.
	decideBy time.Time
}

func newAgreement(parent int, children []int) agreement {
	return agreement{parent: parent, children: children, doneFrom: make([]uint32, len(children))}
}

// start resets the per-post state.
func (a *agreement) start() {
	a.sentDone, a.sentLate, a.lateErr = false, false, nil
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
	if !r.agreed {
		// The default mode: this rank's part is done; the first post also waits for
		// the signature check.
		if r.sigc.ok {
			r.sigc.owed = false // the first post carried it
			r.finish(nil)
		}
		return
	}
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
		t.send(a.parent, ctlMsg{kind: ctlDone, seq: r.seq, post: r.post, origin: uint32(t.rank), sig: r.sig, root: r.root})
	}
	switch {
	case a.finFor >= r.post:
		r.succeed()
	case t.gone(a.parent, r.seq):
		r.undecided(fmt.Sprintf("rank %d, which was to pass the decision down, is gone", a.parent))
	}
}

// awaitsDecision reports whether the post in flight reported done and waits for the
// root's decision, which its parent can still pass down.
func (r *Request) awaitsDecision() bool {
	return r.state == sAgree && r.agree.sentDone && !r.t.gone(r.agree.parent, r.seq)
}

// voteNo sends the parent a no-vote of rank origin for the post in flight, once: it
// fails the post everywhere unless the root decided already. A relayed no-vote keeps
// its origin, so that the failure names the rank that voted no.
func (r *Request) voteNo(origin int, cause string) {
	a, t := &r.agree, r.t
	if a.sentLate || a.parent < 0 {
		return
	}
	a.sentLate = true
	t.send(a.parent, ctlMsg{kind: ctlAbort, flags: flagLate, seq: r.seq, post: r.post, origin: uint32(origin), cause: cause})
}

// undecided ends a post that reported done but cannot learn the decision: the team
// breaks, so that the uncertainty shows on every later call.
func (r *Request) undecided(why string) {
	t := r.t
	err := fmt.Errorf("%s #%d post %d reported done but got no decision: %s: its outcome on the other ranks is unknown",
		r.typ, r.seq, r.post, why)
	t.setBroken(err)
	r.finish(t.broken)
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
// everywhere else: failing it alone would give the ranks different outcomes. It votes
// no instead (which fails the post everywhere if the root has not decided yet) and
// waits for the decision, which a live root sends within its own deadline; past
// Config.Timeout more, the post ends undecided.
func (r *Request) lateDecision(now time.Time) bool {
	a := &r.agree
	if r.state != sAgree || !a.sentDone {
		return false
	}
	if a.decideBy.IsZero() {
		wait := r.t.cfg.Timeout
		if wait <= 0 {
			wait = DefaultTimeout
		}
		a.decideBy = now.Add(wait)
		cause := r.ctxErr
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		a.lateErr = r.ctxError(cause)
		r.voteNo(r.t.rank, fmt.Sprintf("rank %d's deadline passed after it reported done", r.t.rank))
	}
	if now.Before(a.decideBy) {
		return true
	}
	r.undecided(fmt.Sprintf("nothing from rank %d within %v after this rank's deadline", a.parent, now.Sub(r.deadline).Round(time.Millisecond)))
	return true
}

// sigCheck is the default mode's check that every rank initialized the collective
// alike (Config.AllOrNothing off). It runs from Init, beside the data, over the
// overlay tree (rooted at rank 0 whatever the collective's root, so every rank's tree
// is the same even when their arguments differ): a rank sends its signature up
// (ctlSigUp) once every child's has come and matched; the root, once its subtree
// matched, sends the verdict down (ctlSigOK). A rank's first post succeeds only after
// the verdict came, later posts of a persistent request need nothing. A mismatch
// anywhere differs on some edge of the tree, whose parent sees it and never sends
// up: no rank gets the verdict, the parent fails the collective with ErrMismatch and
// the abort floods, so every rank fails it, as in the agreement.
//
// In a team of two the tree is one edge, and the data carries the same evidence: the
// transport's eager headers and ready-to-receives carry a signature that includes
// this one, and the transport tells the request of each that equals its own
// (driver.Witness), once the sizes fit too. A rank that saw the other's knows the
// verdict. So rank 1, when its task sends rank 0 an eager header in every first post
// (driver.Task.Tells), sends no signature: the header is rank 0's evidence, or rank
// 0's transport, which checks it on arrival, fails the collective as a mismatch there
// and answers rank 1, which fails too; and rank 0 sends no verdict to rank 1 when its
// task sends rank 1 an eager header. Where rank 0 does send one and the block is
// agreed (early), it sends it at Init, before rank 1's signature came: then rank 0's
// signature equal to rank 1's is the whole verdict, and rank 1 compares it itself (a
// difference fails rank 1 with ErrMismatch, and rank 0 by rank 1's signature, header
// or abort), so that rank 1's first post waits for a message sent during rank 0's
// Init, not for a round trip after its data. A v-collective's counts are not in the
// signature (each rank knows only its own); the transport checks them on the data,
// so there rank 0 still answers only after it saw rank 1's signature. Each saves a
// message, or a wait, per non-persistent collective; a message over rxe costs a
// system call of about 0.26 ms (docs/design.md, "Against Open MPI over rxe"). Only in
// a team of two: there the rank that waits for the message needs the sender's post
// for its own part anyway, while in a larger team every rank's verdict would wait for
// each silent leaf's post, and a rank whose part needs nothing of that leaf could wait
// out its deadline for it. The signature held back is sent after all (owed) when rank
// 1's first post fails or the request closes unposted, so that a mismatch still reads
// as one. What changes: a mismatched rank 1 that posts only after rank 0's deadline
// times rank 0 out, where the signature at Init would have failed it at once; and
// rank 1's first post, done at once on its side, waits for rank 0's verdict, sent at
// rank 0's Init (or, for a v-collective, once rank 0 polled after rank 1's post).
type sigCheck struct {
	up     uint64 // bit i: child i reported its subtree matched (or its message showed it)
	upSent bool   // this rank sent its signature up, or its message does, or it is the root
	owed   bool   // its message does, once the task posts: until then it is owed
	ok     bool   // every rank initialized the collective as this rank did
	down   bool   // the verdict went to the children
	ready  bool   // Init is done: the signature is known, messages may go
	// early: rank 0 sends its verdict at Init, before rank 1's signature came. Only
	// in a team of two, and only where the block is agreed: there the signature
	// covers every size the transport checks. A v-collective's counts are each
	// rank's own, checked by the transport on the data (a 2-rank gatherv whose
	// counts differ fails only there), so rank 0 answers only after rank 1's
	// signature came, which the transport witnesses only once the sizes fit.
	early bool
}

// sigStep sends this rank's signature up once its subtree matched, and the verdict
// down once it is known (at the root, once its subtree matched).
func (r *Request) sigStep() {
	c, t := &r.sigc, r.t
	if r.agreed || r.pendingErr != nil || !c.ready {
		return
	}
	ov := t.overlay()
	if !c.upSent && c.up == 1<<len(ov.children)-1 {
		c.upSent = true
		switch {
		case ov.parent < 0:
			c.ok = true
		case t.size == 2 && r.task != nil && r.task.Tells(ov.parent):
			c.owed = true // the parent learns it from this rank's first post
		default:
			r.sendSigUp()
		}
	}
	// In a team of two with an agreed block rank 0 need not wait: its own signature is
	// the verdict's whole content for rank 1, so it goes at Init (see early).
	if c.down || !c.ok && !(c.early && ov.parent < 0) {
		return
	}
	c.down = true
	for _, ch := range ov.children {
		if t.size == 2 && r.task != nil && r.task.Tells(ch) || !t.listens(ch, r.seq) {
			continue // the child learns it from this rank's message, or has left
		}
		t.send(ch, ctlMsg{kind: ctlSigOK, seq: r.seq, post: 1, origin: uint32(t.rank), sig: r.sig, cause: r.sigCause})
	}
}

func (r *Request) sendSigUp() {
	t := r.t
	t.send(t.overlay().parent, ctlMsg{kind: ctlSigUp, seq: r.seq, post: 1, origin: uint32(t.rank), sig: r.sig, cause: r.sigCause})
}

// payOwedSig sends the signature that this rank's first post was to carry, when the
// first post did not succeed: it failed (its message may not have left: a staged
// copy-in or a lazy link held it back), or the request closes unposted. A second
// copy of a signature that did go is harmless: the parent compares it.
func (r *Request) payOwedSig() {
	if r.sigc.owed {
		r.sigc.owed = false
		if r.t.listens(r.t.overlay().parent, r.seq) {
			r.sendSigUp()
		}
	}
}

// onSeen is the transport's evidence that peer initialized the collective as this
// rank did (driver.Witness): a leaf child's subtree matched, and in a team of two the
// verdict is known.
func (r *Request) onSeen(peer int) {
	c, t := &r.sigc, r.t
	if r.agreed || c.ok && c.down {
		return
	}
	if t.size == 2 {
		c.ok = true
	}
	ov := t.overlay()
	for i, ch := range ov.children {
		if ch == peer && ov.leaf[i] {
			c.up |= 1 << i
		}
	}
	r.sigStep()
}

// sigWitness is the request as the transport's Witness: a conversion, no allocation.
type sigWitness Request

func (w *sigWitness) Seen(peer int) { (*Request)(w).onSeen(peer) }

// onSigTree handles a child's ctlSigUp or the parent's ctlSigOK.
func (r *Request) onSigTree(peer int, m ctlMsg) {
	if m.sig != r.sig {
		// Whatever this rank runs (a barrier's agreement, say): the sender
		// initialized something else.
		if root, desc, err := decodeSigPayload(m.cause, r.t.size); err == nil {
			r.mismatchWith(peer, root, desc)
		}
		return
	}
	if r.agreed {
		return
	}
	ov := r.t.overlay()
	switch {
	case m.kind == ctlSigOK && peer == ov.parent:
		r.sigc.ok = true
	case m.kind == ctlSigUp:
		for i, ch := range ov.children {
			if ch == peer {
				r.sigc.up |= 1 << i
			}
		}
	}
	r.sigStep()
}

// sigWaiting says what the signature check waits for, for timeout messages.
func (r *Request) sigWaiting() string {
	ov := r.t.overlay()
	var miss []string
	for i, ch := range ov.children {
		if r.sigc.up&(1<<i) == 0 {
			miss = append(miss, fmt.Sprint(ch))
		}
	}
	if len(miss) > 0 {
		return ": waiting for the signatures of rank(s) " + strings.Join(miss, ",") + " (every rank must initialize the collective; in a team of two, rank 1's first post may carry it)"
	}
	return fmt.Sprintf(": waiting for the signature check's verdict from rank %d", ov.parent)
}
