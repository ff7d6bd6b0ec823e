package coll

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// FaultsSeen returns how many steps of kind k t's rank has counted: a fault
// (k, rank, N) has fired on that rank once this reaches N. The soak test tells
// faults that fired from faults that never did with it.
func FaultsSeen(t *Team, k FaultKind) int64 { return t.fs.Seen(k) }

// DebugState describes what t's requests wait for, for the soak's report of a batch
// that runs long: the state of each, its abort (grace, the writers not yet quiet, the
// links still being made) and its agreement (the parent, whether done was sent).
func DebugState(t *Team) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d: broken=%v closed=%v left=%v next=%d", t.rank, t.broken != nil, t.closed, t.left, t.nextSeq.Load())
	if bl, ok := t.tl.(backlogger); ok {
		// Messages behind full send queues leave only while this rank polls.
		fmt.Fprintf(&b, " backlog=%d", bl.Backlog())
	}
	// Which links are up, down or still being made, and what waits for a collective
	// not initialized here yet: the hour soak's barriers past the Timeout left a child
	// waiting for a parent whose news never came, and the dump did not say why.
	var down, linked, linking []int
	for p := 0; p < t.size; p++ {
		switch {
		case p == t.rank:
		case t.tl.PeerDown(p):
			down = append(down, p)
		case t.lazy != nil && t.lazy.Linking(p):
			linking = append(linking, p)
		case t.lazy == nil || t.lazy.Linked(p):
			linked = append(linked, p)
		}
	}
	var stashed []uint64
	for seq := range t.pending {
		stashed = append(stashed, seq)
	}
	slices.Sort(stashed)
	fmt.Fprintf(&b, " down=%v linked=%v linking=%v stashed=%v", down, linked, linking, stashed)
	seqs := make([]uint64, 0, len(t.reqs))
	for seq := range t.reqs {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		r := t.reqs[seq]
		if r.state == sInit || r.state == sDone {
			fmt.Fprintf(&b, "\n  #%d %v %s post %d", seq, r.typ, []string{"init", "", "", "", "", "done"}[r.state], r.post)
			continue
		}
		fmt.Fprintf(&b, "\n  #%d %v post %d state %d%s", seq, r.typ, r.post, r.state, r.waiting())
		if r.agreed {
			fmt.Fprintf(&b, "; agreement: parent %d gone=%v sentDone=%v finFor=%d", r.agree.parent, r.agree.parent >= 0 && t.gone(r.agree.parent, seq), r.agree.sentDone, r.agree.finFor)
		}
		if r.state == sAborting {
			var loud, linking []int
			for _, p := range r.writers() {
				if !r.quiet(p) {
					loud = append(loud, p)
				}
				if t.lazy != nil && t.lazy.Linking(p) {
					linking = append(linking, p)
				}
			}
			fmt.Fprintf(&b, "; abort: grace in %v, not quiet %v, linking %v, transport quiesced %v: %v",
				time.Until(r.abort.grace).Round(time.Millisecond), loud, linking, r.task == nil || r.task.Quiesced(), r.abort.err)
		}
	}
	return b.String()
}

// Progress polls t once, as a Wait would: the soak lets each rank take in what its
// transport learned after its last collective (a peer's hello handed over late, whose
// link then failed here) before it attributes the faults that fired to the batch.
func Progress(t *Team) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.progressLocked()
}
