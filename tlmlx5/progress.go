package tlmlx5

import (
	gocontext "context"
	"errors"
	"fmt"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/verbs"
)

// Progress: Poll drains the CQ, routes each completion (a control slot read, a
// control send done, a data write done), reposts the slots it read and flushes what
// queued meanwhile. Nothing here blocks but WaitEvent.

func (t *team) Broken() error { return t.broken }

// Unsent counts what is queued for, or posted to, peers whose links are up.
func (t *team) Unsent() int {
	n := 0
	for _, pe := range t.linked {
		if !pe.down {
			n += pe.queue.len() + pe.posted
		}
	}
	return n
}

// Backlog counts the messages queued behind full send queues of live peers: they
// leave only as this rank polls (coll's Wait polls until they do, deliverBacklog).
func (t *team) Backlog() int {
	n := 0
	for _, pe := range t.linked { // the peers that have an entry: O(links), not O(n)
		if !pe.down {
			n += pe.queue.len()
		}
	}
	return n
}

func (t *team) PeerDown(p int) bool {
	if p < 0 || p >= t.size {
		return true
	}
	pe := t.peers[p]
	return pe != nil && pe.down // a peer not linked yet is not known to be down
}

// CutOff moves the QP to peer p to the error state: p can no longer write here.
func (t *team) CutOff(p int, why string) {
	if p < 0 || p >= t.size {
		return
	}
	if p == t.rank {
		return
	}
	if pe := t.peers[p]; pe == nil {
		t.downPeer(p, errors.New(why)) // nothing to fence: it has no QP here
	} else {
		t.peerFailed(pe, errors.New(why))
	}
}

// peerFailed takes a peer out of the team. Its QP goes to the error state
// whatever failed (a post, a completion, a control-block read): a peer
// counted as down must not be able to write into this rank's buffers any
// more, since they may be freed once nothing is waited for.
func (t *team) peerFailed(pe *peer, err error) {
	if pe.down {
		return
	}
	if pe.qp != nil {
		_ = pe.qp.MoveToError()
	}
	pe.down = true
	pe.queue.clear()
	t.quarantineGone(pe.rank)
	err = t.failureCause(pe, err)
	if t.broken == nil {
		t.broken = fmt.Errorf("tlmlx5: %w", &driver.LinkError{Peer: pe.rank, Err: err})
	}
	t.tellDown(pe, err)
}

// WaitEvent waits on the team's CQ. A team with several CQs (more than cqGroup
// peers linked) waits on its last one for at most multiCQWait and returns, so that
// completions on the others (its first holds the loopback QP's) are polled soon
// after. Every team has a CQ from its creation on; one without would wait for ctx.
func (t *team) WaitEvent(ctx gocontext.Context) error {
	if t.piecesPending.Load() {
		return nil // a local copy goes on at the next Poll
	}
	t.cqMu.Lock()
	var cq *verbs.CQ
	multi := len(t.cqs) > 1
	if len(t.cqs) > 0 {
		cq = t.cqs[len(t.cqs)-1]
	}
	t.cqMu.Unlock()
	if cq == nil {
		<-ctx.Done()
		t.ev.due.Store(true)
		return ctx.Err()
	}
	if multi {
		wctx, cancel := gocontext.WithTimeout(ctx, multiCQWait)
		defer cancel()
		if err := cq.Wait(wctx); err != nil {
			t.ev.due.Store(true) // no completion came: the device's events may say why
			if ctx.Err() != nil {
				return err
			}
		}
		return nil
	}
	err := cq.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		t.ev.due.Store(true) // no completion came: the device's events may say why
	}
	return err
}

// Poll processes completions.
func (t *team) Poll(h driver.Handler) error {
	if t.closed {
		return nil
	}
	// A team of one rank has no CQ, but its local operations may wait for a
	// source's copy-in: the retry below must run for it too.
	// While a local copy goes in pieces and the CQs give nothing, one Poll moves up
	// to pollPieces pieces, polling the CQs between them (pieces.go).
	for i := 0; ; i++ {
		before := t.completions
		for _, cq := range t.cqs {
			if err := t.pollCQ(cq, h); err != nil {
				return err
			}
		}
		if len(t.srcWait) > 0 || t.piecesPending.Load() {
			t.retrySources() // and clears piecesPending once no copy in pieces is left
		}
		if i+1 >= pollPieces || !t.piecesPending.Load() || t.completions != before {
			break
		}
		t.pollRepeats++
	}
	t.flushQueued()
	if t.msgr != nil {
		t.checkLinks()
	}
	// A Load, not a Swap, on this path of every poll: the atomic write is paid only when
	// a wait asked for the read.
	if t.ev.polls++; t.ev.polls >= eventPolls || t.ev.due.Load() {
		t.ev.due.Store(false)
		t.checkEvents()
	}
	return nil
}

// Completions counts the completions Poll took (driver.Counter).
func (t *team) Completions() uint64 { return t.completions }

// pollCQ drains one of the team's CQs, in rounds of wcBatch.
func (t *team) pollCQ(cq *verbs.CQ, h driver.Handler) error {
	for round := 0; round < 8; round++ {
		n, err := cq.Poll(t.wcs)
		if err != nil {
			return fmt.Errorf("tlmlx5: poll: %w", err)
		}
		t.completions += uint64(n)
		for i := 0; i < n; i++ {
			t.complete(&t.wcs[i], h)
		}
		for _, pe := range t.linked {
			if len(pe.repost) > 0 {
				if !pe.down {
					if err := pe.qp.PostRecv(pe.repost...); err != nil {
						t.peerFailed(pe, err)
					}
				}
				pe.repost = pe.repost[:0]
			}
		}
		if n < len(t.wcs) {
			break
		}
	}
	return nil
}

func (t *team) complete(wc *verbs.WC, h driver.Handler) {
	id := wrID(wc.ID)
	switch id.kind() {
	case wrLoop:
		t.loopDone(wc, id.task(), id.index())
	case wrRecv:
		t.received(wc, id.peer(), id.index(), h)
	case wrCtl:
		pe := t.peers[id.peer()]
		pe.posted--
		s := id.index()
		pe.ctlFree = append(pe.ctlFree, int32(s))
		if ref := pe.ctlOp[s]; ref.set {
			// An eager write that held the slot (flushEagerOne).
			pe.ctlOp[s] = ctlOp{}
			t.dataDone(wc, pe, t.byID[ref.task], int(ref.op))
			return
		}
		if wc.Status != verbs.WCSuccess {
			t.peerFailed(pe, wc.Err())
		}
	case wrData:
		k := t.byID[id.task()]
		if k == nil {
			return
		}
		pe := t.peers[k.ops[id.index()].peer]
		pe.posted--
		t.dataDone(wc, pe, k, id.index())
	}
}

// dataDone is the completion of a work request of operation op of task k (nil when the
// task is gone) on pe's queue pair.
func (t *team) dataDone(wc *verbs.WC, pe *peer, k *task, op int) {
	if k != nil {
		k.outstanding--
	}
	if wc.Status != verbs.WCSuccess {
		t.peerFailed(pe, wc.Err())
		return
	}
	if k == nil {
		return
	}
	o := &k.ops[op]
	o.wrsLeft--
	if o.wrsLeft == 0 && !k.aborted {
		k.opDone(o)
	}
}

// received handles a receive completion on slot s of peer r: data arrived (a write
// with immediate), or a control message sits in the slot.
func (t *team) received(wc *verbs.WC, r, s int, h driver.Handler) {
	pe := t.peers[r]
	if wc.Status != verbs.WCSuccess {
		t.peerFailed(pe, wc.Err())
		return
	}
	pe.repost = append(pe.repost, pe.recvs[s])
	if wc.HasImm {
		t.onImm(r, wc.Imm)
		return
	}
	n := int(wc.Bytes)
	if n < 1 || n > slotSize {
		return
	}
	buf := t.rbuf[:n]
	copy(buf, pe.cb.mem[s*slotSize:])
	t.onSlot(r, buf, h)
}

// onSlot routes the bytes that peer r put in a control slot (1 to slotSize of them):
// coll's messages to its handler, ready-to-receives to their task; anything else, or
// anything that does not decode, is dropped.
func (t *team) onSlot(r int, msg []byte, h driver.Handler) {
	switch msg[0] {
	case slotColl:
		h.Control(r, msg[1:])
	case slotRTR:
		if m, err := decodeRTR(r, msg); err == nil {
			t.onRTR(m)
		}
	case slotEager:
		if m, err := decodeEager(r, msg); err == nil {
			t.onEager(m)
		}
	case slotCredit:
		if s, err := decodeCredit(msg, t.credits[:]); err == nil {
			t.onCredit(r, s)
		}
	case slotRing:
		if m, err := decodeRing(msg); err == nil {
			t.onRing(r, m)
		}
	}
}

// onImm routes the immediate of peer r's write: an eager message in a slot of its
// ring, or data (or a landing piece) of a receive.
func (t *team) onImm(r int, imm uint32) {
	if s, ok := eagerImmSlot(imm); ok {
		t.onEagerWrite(r, s)
		return
	}
	t.onData(r, imm)
}

// onData is the arrival of the data of one receive.
func (t *team) onData(from int, imm uint32) {
	seq, post, tag, partial := splitImm(imm)
	k := t.bySeq[seq]
	if k == nil {
		if len(t.quarantine) > 0 && !partial {
			t.quarantineLanded(from, seq, post, tag)
		}
		return // a closed task's data, polled late
	}
	if k.aborted {
		if post == k.post%(1<<postBits) {
			k.landedAborted(from, tag, partial)
		} else {
			k.dataAhead(from, post, tag, partial) // lands where the RTR sent ahead named: Close need not keep it
		}
		return // an aborted post's data, polled late: nothing waits for it
	}
	if post != k.post%(1<<postBits) {
		k.dataAhead(from, post, tag, partial) // or an aborted post's
		return
	}
	if tag >= len(k.recvByTag) || k.recvByTag[tag] < 0 {
		k.fail(fmt.Errorf("tlmlx5: %v #%d: %w: rank %d wrote tag %d, which this rank does not expect", k.spec.Type, k.seq, driver.ErrMismatch, from, tag))
		return
	}
	o := &k.ops[k.recvByTag[tag]]
	if !o.awaitsWrite(from) {
		k.fail(fmt.Errorf("tlmlx5: %v #%d: %w: unexpected data for tag %d from rank %d", k.spec.Type, k.seq, driver.ErrMismatch, tag, from))
		return
	}
	if partial {
		// One landing piece: the next pieceOf(n) bytes are in place, the rest to come.
		piece := pieceOf(o.n)
		if o.landed+piece >= o.n {
			k.fail(fmt.Errorf("tlmlx5: %v #%d: %w: rank %d reported more landed pieces of tag %d than its %d bytes hold", k.spec.Type, k.seq, driver.ErrMismatch, from, tag, o.n))
			return
		}
		if o.out.b == k.out && k.landed != nil {
			k.landed(o.out.off+o.landed, piece)
		}
		o.landed += piece
		k.pieces++
		k.streamLanded(o)
		return
	}
	k.opDone(o)
}

// landedAborted notes the last write of a receive of an aborted post: nothing waits for
// its data, but the peer can no longer write into this rank's buffer for it, so it
// leaves Writers. A failing rank then does not wait for the abort's acknowledgement
// of a peer that finished its part and went idle without calling the library again
// (and cut it off past the grace, breaking the team). A landing piece says more is
// to come, and bad data of a failed post is no news.
func (k *task) landedAborted(from, tag int, partial bool) {
	if partial || tag >= len(k.recvByTag) || k.recvByTag[tag] < 0 {
		return
	}
	if o := &k.ops[k.recvByTag[tag]]; o.awaitsWrite(from) {
		o.state = opDone
	}
}

// onRTR routes a ready-to-receive to its task, or keeps it for a task not created yet.
func (t *team) onRTR(m rtr) {
	k := t.tasks[m.seq]
	if k == nil {
		// A peer is at most SeqWindow collectives ahead, and sends one
		// ready-to-receive per tag: more is malformed, and must not grow the stash.
		if next := t.p.NextSeq(); m.seq >= next && m.seq-next < SeqWindow && len(t.stash[m.seq]) <= maxTag {
			l, ok := t.stash[m.seq]
			if !ok && len(t.stashFree) > 0 {
				l = t.stashFree[len(t.stashFree)-1]
				t.stashFree = t.stashFree[:len(t.stashFree)-1]
			}
			t.stash[m.seq] = append(l, m)
		}
		return
	}
	k.onRTR(m)
}

// maxStashFree bounds the emptied stash lists kept: a few collectives' worth.
const maxStashFree = 8

// unstash drops collective seq's stashed ready-to-receives, l, keeping l's backing
// array for the next ones: a root a collective ahead of this rank stashes one list
// per collective, which then allocates nothing once warm.
func (t *team) unstash(seq uint64, l []rtr) {
	delete(t.stash, seq)
	if cap(l) > 0 && len(t.stashFree) < maxStashFree {
		clear(l)
		t.stashFree = append(t.stashFree, l[:0])
	}
}
