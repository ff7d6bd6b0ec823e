package coll

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
)

// A request's life: Init builds it (init.go); each Post runs the transport
// (sRunning), then the completion agreement (sAgree, agree.go) until every rank
// finished, or fails and waits until no peer can still write here (sAborting,
// abort.go). Progress and waiting live in progress.go, control messages in
// control.go.

type reqState uint8

const (
	sInit     reqState = iota // initialized, never posted
	sRunning                  // the transport moves data
	sAgree                    // done here (copy-out included); waiting for the others
	sStalled                  // injected stall
	sAborting                 // failed; waiting until no peer can still write here
	sDone                     // the last post finished (err says how)
)

// Request is one initialized collective of one rank. Its methods are safe for
// concurrent use.
type Request struct {
	t          *Team
	seq        uint64
	typ        CollType
	persistent bool
	desc       string
	sigCause   string        // sigPayload(root, desc); desc is its tail
	alg        string        // the transport's algorithm, fixed at Init
	root       int           // Args.Root of a rooted collective, noRoot otherwise
	sig        uint32        // hash of desc: what every rank's must equal
	stage      *asym.Stage   // &kit.stage while the request holds one
	kit        *stageKit     // from the team's kits (Team.takeKit), until release
	staged     StagingReport // the stage's last report, kept after Close
	unused     [2]bool       // Src, Dst: the collective does not use it on this rank
	task       driver.Task
	outputs    driver.OutputOwner // the task, where it may hold a persistent staged output (Init)
	pin        pinner
	// held: the mem.Buffers of the arguments (Src, Dst), acquired at Init (their
	// Close fails until this request's release lets them go)
	held [2]*mem.Buffer
	// agreed: the post ends by the completion agreement (Config.AllOrNothing, and
	// every barrier, whose agreement is its synchronization); otherwise by this
	// rank's own part and, on the first post, the signature check.
	agreed bool
	agree  agreement
	sigc   sigCheck
	abort  abortState
	peers  []int // the task's peers (driver.Task.Peers), asked for at the first failure

	// Per post, under t.mu.
	post          uint32
	state         reqState
	err           error // outcome of the last finished post
	stageInFlight bool
	stalled       error // the injected stall of the post (fault.Stall), for its timeout
	posted        time.Time
	spec          driver.TaskSpec // what Init gave the transport
	deadline      time.Time       // zero: none
	ctxErr        error           // why Wait's ctx ended, when it did
	pendingErr    error           // a mismatch found before this rank posted; it fails every post
	sigSent       bool            // this rank's signature went to the children it waits for (sendSig)
	closed        bool
}

// pinner pins the Go memory of Slice buffers while the request lives: staging copies
// and registrations use their addresses.
type pinner struct{ p runtime.Pinner }

// Post starts the collective (again, for a persistent request whose last post
// succeeded). Misuse (a request in flight, a non-persistent request posted twice, a
// persistent one whose last post failed, a closed request) returns an error and
// changes nothing. On a broken team Post returns the break and starts nothing, but
// tells the peers that this post failed (so that none waits for it), and a Wait or
// Test of the request returns the break too (of one never posted, or of a persistent
// one whose last post succeeded: the refused post counts as a failed one). A failure of the post itself (the
// copy-in of a staged source, the transport) is returned too, and told to the peers;
// Wait then returns it once no peer can still write into this rank's buffers.
func (r *Request) Post() error {
	if r == nil || r.t == nil {
		return invalid("Post", "nil or zero Request: only Team.Init or InitInto makes a usable one")
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.settle() // what this call queued leaves even if no call follows
	switch {
	case r.closed:
		return fmt.Errorf("coll: Post: request: %w", ErrClosed)
	case t.broken != nil:
		r.refusedBroken()
		err := fmt.Errorf("coll: Post: %s #%d: %w", r.typ, r.seq, t.broken)
		if r.state == sDone && r.err == nil {
			// A persistent request's next post, refused: it counts as a post that
			// failed, so that Wait and Test say so instead of the last post's success
			// (Dst still holds that post's result).
			r.post++
			r.err = err
		}
		return err
	case r.state != sInit && r.state != sDone:
		return fmt.Errorf("coll: Post: %s #%d post %d is still in flight: Wait for it first: %w", r.typ, r.seq, r.post, ErrBusy)
	case r.state == sDone && !r.persistent:
		return invalid("Post", "%s #%d was posted already: only a request initialized with Flags Persistent may be posted again", r.typ, r.seq)
	case r.state == sDone && r.err != nil:
		return invalid("Post", "%s #%d: its last post (%d) failed, and a persistent request may be posted again only after a successful post (it failed with: %v)", r.typ, r.seq, r.post, r.err)
	}
	now := time.Now()
	r.post++
	r.state = sRunning
	r.err, r.abort.err, r.ctxErr = nil, nil, nil
	r.agree.start()
	r.posted = now
	r.deadline = time.Time{}
	if to := t.cfg.Timeout; to > 0 {
		r.deadline = now.Add(to)
	}
	if r.pendingErr != nil {
		r.fail(r.pendingErr)
		return r.abort.err
	}
	if fa := r.abort.future; fa != nil && fa.Post <= r.post {
		r.abort.future = nil
		r.fail(fa)
		return r.abort.err
	}
	if err := t.fs.Hit(fault.Deadline); err != nil {
		r.deadline = now
		r.fail(r.ctxError(fmt.Errorf("%w: %w", err, context.DeadlineExceeded)))
		return r.abort.err
	}
	// A stall and a link's break take effect further on, unless a failure of the copy-in
	// or the transport comes first: they count as fired only there.
	stallTook, stallErr := t.fs.Arm(fault.Stall)
	stall := stallErr != nil
	qperrTook, qperr := t.fs.Arm(fault.QPErr)
	if r.outputs != nil {
		if err := r.stage.SetOutput(r.outputs.Output(r.post)); err != nil {
			r.fail(r.lower(err))
			return r.abort.err
		}
	}
	if err := r.stage.CopyIn(); err != nil {
		r.fail(r.lower(err))
		return r.abort.err
	}
	r.stageInFlight = true
	if stall {
		stallTook()
		r.stalled = stallErr
		r.state = sStalled
		if r.deadline.IsZero() {
			r.deadline = now.Add(DefaultTimeout)
		}
		return nil
	}
	if err := r.task.Post(r.post); err != nil {
		r.fail(r.lower(err))
		return r.abort.err
	}
	if qperr != nil {
		// The rank knows at once what a transport reports with the next completion:
		// its link is gone, and with it the team.
		qperrTook()
		if err := r.task.BreakLink(); err != nil {
			qperr = errors.Join(qperr, err)
		}
		t.setBroken(fmt.Errorf("link to a peer broken: %w", qperr))
		return r.abort.err
	}
	t.progressAt(&clock{t: now})
	return nil
}

// refusedBroken tells the peers that wait on this rank for the post it refuses (the
// team broke here first) that it fails: a rank below this one in the agreement tree
// may have posted before it heard of the break and reported done, and it waits for a
// decision that only passes through here. Without this the soak saw such a barrier
// wait out its deadline and Config.Timeout more. It goes where an abort goes (the
// overlay and the task's peers) and to the agreement's children, once per post.
func (r *Request) refusedBroken() {
	t := r.t
	post := r.post + 1
	if r.closed || !r.abort.tell(post, false) {
		return
	}
	cause := fmt.Sprintf("%s #%d was posted on a broken team: %v", r.typ, r.seq, t.broken)
	t.flood(r.seq, post, t.rank, cause, flagBroken)
	if r.agreed {
		t.tellUnreached(r.agree.children, ctlMsg{kind: ctlAbort, flags: flagBroken, seq: r.seq, post: post, origin: uint32(t.rank), cause: cause})
	}
	// The caller gets its error now and may not poll again: what does not fit the send
	// queues leaves from the drainer (Post's settle).
}

// Test drives progress once and reports whether the last post finished, with its
// error. It never blocks.
func (r *Request) Test() (bool, error) {
	if r == nil || r.t == nil {
		return false, invalid("Test", "nil or zero Request: only Team.Init or InitInto makes a usable one")
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.settle() // what this call queued leaves even if no call follows
	if r.closed {
		return false, fmt.Errorf("coll: Test: request: %w", ErrClosed)
	}
	if r.state == sInit {
		return false, invalid("Test", "%s #%d was never posted", r.typ, r.seq)
	}
	if r.state != sStalled {
		t.progressLocked()
	} else {
		r.advance(new(clock))
	}
	if r.state == sDone {
		return true, r.err
	}
	return false, nil
}

// Wait drives progress until the last post finished and returns its error. ctx's
// deadline, when it has one, replaces Config.Timeout for this post; when ctx ends
// first, the post fails here and this rank tells its peers. A failed post returns only
// once no peer can still write into this rank's buffers: bounded by Config.AbortGrace
// (a peer that does not answer is cut off and the team breaks), longer where a link to
// such a peer is still being made (the link's own bound, 30 s in tlmlx5); work of the
// post that the transport still holds is waited for at most 5 s past the grace (then
// the post's peers are cut off and the team breaks).
func (r *Request) Wait(ctx context.Context) error {
	if r == nil || r.t == nil {
		return invalid("Wait", "nil or zero Request: only Team.Init or InitInto makes a usable one")
	}
	if ctx == nil {
		return invalid("Wait", "nil context.Context")
	}
	t := r.t
	t.mu.Lock()
	switch {
	case r.closed:
		t.mu.Unlock()
		return fmt.Errorf("coll: Wait: request: %w", ErrClosed)
	case r.state == sInit && t.broken != nil:
		// Its Post was refused, or never came, on a team that broke: the break is
		// what the caller must hear, not a misuse of its own.
		t.mu.Unlock()
		return fmt.Errorf("coll: Wait: %s #%d was never posted: %w", r.typ, r.seq, t.broken)
	case r.state == sInit:
		t.mu.Unlock()
		return invalid("Wait", "%s #%d was never posted", r.typ, r.seq)
	}
	if d, ok := ctx.Deadline(); ok && r.state != sDone && r.state != sAborting {
		r.deadline = d
	}
	t.mu.Unlock()
	return t.waitFor(ctx, r)
}

// Close releases the request: its staging scratch, its transport resources and its
// pinned memory. It refuses with ErrBusy while a post is in flight. Idempotent and
// nil-safe.
func (r *Request) Close() error {
	if r == nil || r.t == nil {
		return nil
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.settle() // what this call queued leaves even if no call follows
	if r.closed {
		return nil
	}
	if r.state != sInit && r.state != sDone {
		return fmt.Errorf("coll: Close: %s #%d post %d is in flight: Wait for it first: %w", r.typ, r.seq, r.post, ErrBusy)
	}
	// A request of a failed InitInto (stuck) was told to the peers when it failed.
	tell := !slices.Contains(t.stuck, r) && ((r.state == sInit && r.post == 0) || (r.persistent && r.state == sDone && r.err == nil))
	if tell {
		r.taskPeers() // the flood below goes to them too, and needs the task
	}
	if err := r.release(); err != nil {
		return fmt.Errorf("coll: Close: %s #%d: %w", r.typ, r.seq, err)
	}
	// Peers may still post what this rank will now never post: a request
	// never posted, or a persistent one that could be posted again. Tell
	// them, as a failed Init does, instead of letting them wait out their
	// deadline. (A peer that closed too just acknowledges.)
	if tell {
		t.flood(r.seq, r.post+1, t.rank, fmt.Sprintf("rank %d closed %s #%d without posting it (again)", t.rank, r.typ, r.seq), 0)
		t.remember(r.seq, r.post+1)
	}
	if r.abort.told != 0 {
		t.remember(r.seq, r.abort.told) // what comes back of it needs no relay
	}
	r.closed = true
	delete(t.reqs, r.seq)
	if i := slices.Index(t.live, r); i >= 0 {
		t.live = slices.Delete(t.live, i, i+1)
	}
	if i := slices.Index(t.stuck, r); i >= 0 {
		t.stuck = slices.Delete(t.stuck, i, i+1)
	}
	return nil
}

// release frees what the request holds, the transport's first (it may use the
// scratch).
func (r *Request) release() error {
	var errs []error
	if r.task != nil {
		if err := r.task.Close(); err != nil {
			errs = append(errs, err)
		} else {
			r.task, r.outputs = nil, nil
		}
	}
	if r.task == nil && r.stage != nil {
		r.staged = r.stage.Report()
		if err := r.stage.Close(); err != nil {
			errs = append(errs, err)
		} else {
			r.stage = nil
			r.t.putKit(r.kit)
			r.kit = nil
		}
	}
	if len(errs) == 0 {
		r.pin.p.Unpin()
		r.releaseHeld()
	}
	return errors.Join(errs...)
}

// releaseHeld lets go of the argument buffers that Init acquired.
func (r *Request) releaseHeld() {
	for i, b := range r.held {
		b.Release() // nil-safe
		r.held[i] = nil
	}
}

// reuseRequest empties r for another collective, keeping the arrays it can use again.
func reuseRequest(r *Request) {
	done := r.agree.doneFrom
	*r = Request{}
	r.agree.doneFrom = done[:0]
}

// Staging reports how this rank's buffers go through the collective (each side direct,
// through a scratch of which type, pinned or not, or unused on this rank, such as a
// scatter's Src off the root) and how many bytes the staging
// copies moved over all posts so far; after Close, what they moved until then. Tools
// divide Copied by the posts to show the staging cost per iteration.
func (r *Request) Staging() StagingReport {
	if r == nil || r.t == nil {
		return StagingReport{}
	}
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	rep := r.staged
	if r.stage != nil {
		rep = r.stage.Report()
	}
	rep.Src.Unused, rep.Dst.Unused = r.unused[0], r.unused[1]
	return rep
}

// Seq is the request's place in the team's order of Init calls.
func (r *Request) Seq() uint64 {
	if r == nil {
		return 0
	}
	return r.seq
}

// Alg is the algorithm the transport chose.
func (r *Request) Alg() string {
	if r == nil {
		return ""
	}
	return r.alg
}

// taskPeers are the task's peers (driver.Task.Peers). Only a failure needs them, so
// they are asked for then, not at every Init; Close asks before it releases the task.
func (r *Request) taskPeers() []int {
	if r.peers == nil && r.task != nil {
		r.peers = r.task.Peers()
		if r.peers == nil {
			r.peers = []int{}
		}
	}
	return r.peers
}

// lower names the post in an error of a lower layer (staging, the transport).
func (r *Request) lower(err error) error {
	return &opError{fmt.Sprintf("%s #%d post %d", r.typ, r.seq, r.post), err}
}

// finish ends the post in flight with err; a failure on a team that broke meanwhile
// says so too.
func (r *Request) finish(err error) {
	if err != nil && r.t.broken != nil && !errors.Is(err, ErrTeamBroken) {
		err = errors.Join(err, r.t.broken)
	}
	r.state = sDone
	r.err = err
}

// ctxError is the error of a post whose deadline passed or whose ctx ended.
func (r *Request) ctxError(cause error) error {
	what := "timed out"
	if errors.Is(cause, context.Canceled) {
		what = "cancelled"
	}
	return &timeoutError{
		msg: fmt.Sprintf("coll: %s #%d post %d %s after %v on rank %d (%v)%s", r.typ, r.seq, r.post, what,
			time.Since(r.posted).Round(time.Millisecond), r.t.rank, cause, r.waiting()),
		ctx: cause,
	}
}

// waiting says what the post waits for, for timeout messages.
func (r *Request) waiting() string {
	switch r.state {
	case sRunning:
		if w := r.task.Waiting(); w != "" {
			return ": waiting for " + w
		}
	case sAgree:
		if !r.agreed {
			return r.sigWaiting()
		}
		return r.agree.waiting(r.post)
	case sStalled:
		return ": stalled (injected)"
	}
	return ""
}

// wakeAt is when the post must be looked at even if nothing happens.
func (r *Request) wakeAt() time.Time {
	w := r.wakeAtBase()
	if r.sigDue() {
		if s := r.posted.Add(sigDelay); w.IsZero() || s.Before(w) {
			w = s
		}
	}
	return w
}

// sigDue reports whether this rank's signature is still to be sent: only while the
// first post runs (a post that succeeded proves that the ranks agree, and a failed
// first post is never posted again) and before this rank reported it done.
func (r *Request) sigDue() bool {
	return r.agreed && r.post == 1 && !r.sigSent && !r.agree.sentDone && (r.state == sRunning || r.state == sAgree)
}

func (r *Request) wakeAtBase() time.Time {
	switch {
	case r.state == sAborting:
		return r.abort.wakeAt()
	case !r.agree.decideBy.IsZero():
		return r.agree.decideBy
	case r.state == sRunning && r.stage != nil && r.stage.CopyingIn():
		// The transport waits for a copy-in whose end is no completion: poll.
		return time.Now().Add(copyInPoll)
	}
	return r.deadline
}

// advance moves the post along; called under t.mu after every poll.
func (r *Request) advance(clk *clock) {
	switch r.state {
	case sStalled:
		if r.expired(clk) {
			r.fail(r.ctxError(fmt.Errorf("%w: %w", r.stalled, context.DeadlineExceeded)))
		}
	case sAborting:
		r.advanceAbort(clk.now())
	case sRunning, sAgree:
		if r.sigDue() && !clk.now().Before(r.posted.Add(sigDelay)) {
			r.sigSent = true
			r.sendSig()
		}
		if r.state == sRunning {
			r.checkTask()
		} else if r.task != nil {
			// Evidence of a mismatch may reach the transport after this rank's part
			// ended (a ready-to-receive for a tag it does not send): it still fails
			// the post, which cannot succeed anywhere.
			if _, err := r.task.State(); errors.Is(err, ErrMismatch) {
				r.fail(r.lower(err))
			}
		}
		if r.state == sAgree {
			r.vote()
		}
		// Background polls (the keeper's, the drainer's) leave deadlines alone: the
		// Wait to come may bring a ctx deadline that replaces Config.Timeout.
		if (r.state == sRunning || r.state == sAgree) && !r.t.background && r.expired(clk) && !r.lateDecision(clk.now()) {
			cause := r.ctxErr
			if cause == nil {
				cause = context.DeadlineExceeded
			}
			r.fail(r.ctxError(cause))
		}
	}
}

// checkTask moves a post whose data movement is done here to the agreement, after the
// copy-out of a staged destination.
func (r *Request) checkTask() {
	done, err := r.task.State()
	if err != nil {
		r.fail(r.lower(err))
		return
	}
	if !done {
		return
	}
	r.stageInFlight = false
	r.state = sAgree
	if err := r.stage.Complete(nil); err != nil {
		r.fail(r.lower(err))
	}
}

// expired reads the clock only where the post has a deadline.
func (r *Request) expired(clk *clock) bool {
	return !r.deadline.IsZero() && !clk.now().Before(r.deadline)
}

// onCtl handles a control message for this request.
func (r *Request) onCtl(peer int, m ctlMsg) {
	if r.agreed && m.post > r.post+1 {
		// A peer is at most one post ahead: post p+1 starts only after p succeeded
		// everywhere, this rank included. Anything further is malformed. (In the
		// default mode a rank may be several posts ahead of a peer it does not
		// exchange data with.)
		return
	}
	switch m.kind {
	case ctlDone:
		if m.sig != r.sig {
			r.mismatchWith(peer, m.root, "")
			return
		}
		r.agree.childDone(peer, m.post)
	case ctlFin:
		r.agree.fin(m.post)
	case ctlAbort:
		r.onAbort(peer, m)
	case ctlSig:
		r.onSig(peer, m)
	case ctlSigUp, ctlSigOK:
		r.onSigTree(peer, m)
	}
}

// sendSig tells the children of the agreement tree that have not reported the post
// done what this rank initialized (see ctlSig); each compares as soon as it
// initialized the collective too, posted or not. It goes once, when the first post is
// still running sigDelay after it started and this rank has not reported done.
//
// Why that finds every mismatch: no post of a mismatched collective can succeed (the
// done signatures see to that), so the agreement's root waits; on the path from it to
// any rank whose signature differs, the first edge where the signature changes joins
// a parent that waits for its child (the child never reports done to it, or does and
// the done's signature differs) and so sends it this message, which differs. Why it
// is safe: a child that has not reported done cannot have finished the post (it
// needs this rank's decision), so the message never reaches a team that closed after
// a success. A collective that ends sooner than sigDelay sends nothing.
func (r *Request) sendSig() {
	t := r.t
	var m *ctlMsg
	for i, c := range r.agree.children {
		if r.agree.doneFrom[i] >= r.post || t.gone(c, r.seq) {
			continue
		}
		if m == nil {
			m = &ctlMsg{kind: ctlSig, seq: r.seq, origin: uint32(t.rank), sig: r.sig, cause: r.sigCause}
		}
		t.send(c, *m)
	}
}

// onSig compares the previous rank's signature with this rank's.
func (r *Request) onSig(peer int, m ctlMsg) {
	if m.sig == r.sig {
		return
	}
	root, desc, err := decodeSigPayload(m.cause, r.t.size)
	if err != nil {
		return
	}
	r.mismatchWith(peer, root, desc)
}

// mismatchWith fails the request with the disagreement between this rank and peer,
// which has root (noRoot: unrooted) and describes the collective as desc (empty:
// unknown). The text names ranks, not "this rank": the other ranks read it in the
// abort this rank floods.
func (r *Request) mismatchWith(peer, root int, desc string) {
	r.mismatch(r.t.mismatchError(r.seq, peer, root, desc, r.root, r.desc))
}

// mismatchError is the error of collective seq, which peer initialized with root
// peerRoot as peerDesc says and this rank with myRoot as myDesc says: a root mismatch
// where both have a root and the roots differ, else the two descriptions.
func (t *Team) mismatchError(seq uint64, peer, peerRoot int, peerDesc string, myRoot int, myDesc string) error {
	if peerRoot != myRoot && peerRoot != noRoot && myRoot != noRoot {
		return fmt.Errorf("%w: root mismatch in collective #%d: rank %d has root %d, rank %d has root %d (%s): every rank must pass the same Args.Root",
			ErrMismatch, seq, peer, peerRoot, t.rank, myRoot, myDesc)
	}
	if peerDesc == "" {
		peerDesc = "a different collective"
	}
	if myDesc == "" {
		myDesc = "a different collective"
	}
	return fmt.Errorf("%w: ranks initialized collective #%d differently: rank %d as %s, rank %d as %s: every rank must initialize the same collectives, with the same arguments, in the same order",
		ErrMismatch, seq, peer, peerDesc, t.rank, myDesc)
}

// mismatch fails the post in flight with err, which wraps ErrMismatch; before the
// first post it keeps err for every post and tells the peers at once, so that none
// waits for this rank to post. In AllOrNothing mode no post could have succeeded (the
// agreement's signatures see to it), so failing one that reported done is safe. In
// the default mode a first post may have succeeded on an assumed signature (sigCheck)
// before the news: its success stands, later posts fail, and the peers hear it.
func (r *Request) mismatch(err error) {
	err = &opError{fmt.Sprintf("%s #%d", r.typ, r.seq), err}
	switch r.state {
	case sAborting:
		return
	case sDone:
		// The first post passed the check on an assumption and succeeded (its output
		// is right); the collective is mismatched all the same: later posts fail,
		// and every rank hears it.
		if r.pendingErr == nil && !r.agreed {
			r.pendingErr = err
			if r.abort.tell(1, true) {
				r.t.flood(r.seq, 1, r.t.rank, err.Error(), flagMismatch)
			}
		}
		return
	case sInit:
		if r.pendingErr != nil {
			return
		}
		r.pendingErr = err
		if r.abort.tell(1, true) {
			r.t.flood(r.seq, 1, r.t.rank, err.Error(), flagMismatch)
		}
		return
	}
	if r.pendingErr == nil {
		r.pendingErr = err
	}
	r.fail(err)
}
