package tlmlx5

import (
	"errors"
	"slices"
	"sync/atomic"

	"github.com/ibcoll/ibcoll/mem"
)

// Quarantine: scratch of a closed task that a peer may still write into.
//
// A failed post's receives that land in the transport's own scratch (a reduction's
// inputs: a k-nomial child's vector, a recursive-doubling partner's, the ring's chunks
// in place) expose memory that nothing reads again: the failed task folds no more, and
// a failed request is never posted again. Two kinds:
//   - the post's own receives whose ready-to-receive went out and whose data has not
//     landed. The peer may not have reached the collective yet (its program computes,
//     or its deadline is later), and it writes, or hears of the failure, only when it
//     gets there;
//   - receives that arm ahead (ahead.go), whose peer holds the ready-to-receive of the
//     next post. It may have finished its own part of the failed post and gone idle
//     holding that RTR; in the default mode it may even post the next post, and write,
//     before the news reaches it.
// Waiting for such a peer's acknowledgement (as for any exposed buffer) would cut it
// off past AbortGrace and break the team, over a buffer that nothing reads. So Writers
// leaves these exposures out, and Close keeps each buffer still exposed allocated and
// registered here instead of freeing it. A freed buffer would turn the late write into
// a remote access error that breaks the link. Receives into the user's memory (or
// staging scratch, or DM) stay in Writers: a write into them after the failed post
// returned would be a write into memory the caller owns again.
//
// A kept buffer is freed as soon as no write into it can come: the write lands (onData
// routes a closed task's data here); the peer answers the abort (Answered: it heard of
// the failure, so it writes nothing more, and RC ordering puts any write it made before
// its answer); the peer's link goes down; or the team closes, after its queue pairs.
// An idle peer answers when it next calls the library, so a buffer outlives the
// request only while its peer stays away. A peer that answered before Close leaves
// nothing to keep (Answered clears the exposure of an open task).

// keptNow counts the buffers quarantined now, over every team of the process.
var keptNow atomic.Int64

// KeptBuffers reports how many buffers of closed collectives the transport keeps now,
// over every team of the process, for writes that peers may still make (the scratch
// of a failed reduction that a peer holds a ready-to-receive of): each goes when its
// write lands, its peer answers the abort or leaves, or its team closes. Tests and
// tools read it to see that none outlives its need.
func KeptBuffers() int { return int(keptNow.Load()) }

// quarantined is one kept buffer and the writes it still awaits.
type quarantined struct {
	seq    uint64  // the closed task's
	addr   uintptr // the buffer's, as the task knew it
	own    *mem.Buffer
	reg    *regEntry
	writes []aheadWrite
}

// aheadWrite is a write a peer may still make: its data for post and tag.
type aheadWrite struct {
	peer, tag int
	post      uint32
}

// quarantineAhead moves the buffers that the failed task's receives exposed ahead, and
// whose data has not landed, from the task to the team's quarantine, so that release
// leaves them alone. Called by Close after dropAhead (an RTR that never left exposes
// nothing).
func (k *task) quarantineAhead() {
	for i := range k.ops {
		o := &k.ops[i]
		if !o.armsAhead || !k.exposedAhead(o) || k.t.PeerDown(o.peer) {
			continue
		}
		if b := k.scratchAt(o, o.ahead); b != nil {
			k.keep(b, aheadWrite{peer: o.peer, tag: o.tag, post: o.ahead})
		}
	}
}

// quarantineCurrent moves the scratch that the failed post's own receives still
// expose (their ready-to-receive went out and their data has not landed) to the
// team's quarantine. Called by Close after the task's queued ready-to-receives were
// dropped unsent (dropUnsent).
func (k *task) quarantineCurrent() {
	for i := range k.ops {
		o := &k.ops[i]
		if o.kind != opRecv || !o.awaitsWrite(o.peer) || k.t.PeerDown(o.peer) {
			continue
		}
		if b := k.scratchAt(o, k.post); b != nil {
			k.keep(b, aheadWrite{peer: o.peer, tag: o.tag, post: k.post})
		}
	}
}

// scratchAt is the transport's own scratch that receive o lands in at post (the
// buffer of that post's parity where it arms ahead), or nil where o lands in memory
// the transport does not own (the user's, staging scratch, DM).
func (k *task) scratchAt(o *op, post uint32) *lbuf {
	b := o.out.b
	if b == nil {
		return nil
	}
	if b.alt != nil && post%2 != b.side {
		b = b.alt
	}
	if b.own == nil && !b.kept {
		return nil
	}
	return b
}

// keep moves scratch b to the team's quarantine, awaiting write w, or adds w to the
// writes it awaits where another receive of the task moved it already (one scratch
// for several receives).
func (k *task) keep(b *lbuf, w aheadWrite) {
	t := k.t
	if b.kept {
		for _, q := range t.quarantine {
			if q.seq == k.seq && q.addr == b.addr {
				if !slices.Contains(q.writes, w) { // a Close retried after release failed
					q.writes = append(q.writes, w)
				}
				return
			}
		}
		return
	}
	t.quarantine = append(t.quarantine, &quarantined{seq: k.seq, addr: b.addr, own: b.own, reg: b.reg, writes: []aheadWrite{w}})
	b.own, b.reg, b.kept = nil, nil, true
	keptNow.Add(1)
}

// quarantineLanded takes the data of a closed task (its sequence number's seqKey, and
// the low postBits bits of its post): the write it was kept for is one fewer.
func (t *team) quarantineLanded(from int, seq uint16, post uint32, tag int) {
	done := false
	t.unquarantineWrites(func(q *quarantined, w aheadWrite) bool {
		if done || seqKey(q.seq) != seq || w.peer != from || w.tag != tag || w.post%(1<<postBits) != post {
			return false
		}
		done = true
		return true
	})
}

// Answered is coll's news that peer heard of the failure of post of collective seq
// (driver.Answerer): it writes nothing more into this rank's buffers for posts from
// post on. An open task's receives stop counting their RTRs sent ahead to peer as
// exposed, so Close keeps nothing for them; a closed task's kept buffers await its
// writes no more.
func (t *team) Answered(peer int, seq uint64, post uint32) {
	if k := t.tasks[seq]; k != nil {
		for i := range k.ops {
			o := &k.ops[i]
			if o.armsAhead && o.peer == peer && k.exposedAhead(o) && o.ahead >= post {
				o.ahead = 0 // its next post, if any, asks afresh
			}
			if (k.aborted || k.err != nil) && o.kind == opRecv && o.awaitsWrite(peer) && k.post >= post {
				o.state = opDone // the failed post's data from peer will not come
			}
		}
		return
	}
	if len(t.quarantine) > 0 {
		t.unquarantineWrites(func(q *quarantined, w aheadWrite) bool {
			return q.seq == seq && w.peer == peer && w.post >= post
		})
	}
}

// quarantineGone drops the writes that peer r may make: its link is down (its QP in
// the error state) or it left, so none can come.
func (t *team) quarantineGone(r int) {
	if len(t.quarantine) > 0 {
		t.unquarantineWrites(func(_ *quarantined, w aheadWrite) bool { return w.peer == r })
	}
}

// unquarantineWrites drops the awaited writes that match, and frees each buffer that
// awaits none any more (one whose release fails stays, for the team's close).
func (t *team) unquarantineWrites(match func(*quarantined, aheadWrite) bool) {
	kept := t.quarantine[:0]
	for _, q := range t.quarantine {
		q.writes = slices.DeleteFunc(q.writes, func(w aheadWrite) bool { return match(q, w) })
		if len(q.writes) > 0 || t.unquarantine(q) != nil {
			kept = append(kept, q)
		}
	}
	clear(t.quarantine[len(kept):])
	t.quarantine = kept
}

// unquarantine deregisters and frees q's buffer; a failed step is kept for a retry.
func (t *team) unquarantine(q *quarantined) error {
	if q.reg != nil {
		if err := t.cache.release(q.reg); err != nil {
			return err
		}
		q.reg = nil
	}
	if q.own != nil {
		if err := q.own.Close(); err != nil {
			return err
		}
		q.own = nil
		keptNow.Add(-1)
	}
	return nil
}

// dropQuarantine frees every quarantined buffer: the team closes, and its queue pairs
// are gone, so nothing writes into them any more. One whose release fails stays, so
// that a retried Close frees it.
func (t *team) dropQuarantine() error {
	var errs []error
	kept := t.quarantine[:0]
	for _, q := range t.quarantine {
		if err := t.unquarantine(q); err != nil {
			errs = append(errs, err)
			kept = append(kept, q)
		}
	}
	clear(t.quarantine[len(kept):])
	t.quarantine = kept
	return errors.Join(errs...)
}
