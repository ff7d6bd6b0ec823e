package tlmlx5

import (
	"fmt"
	"slices"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// The eager path: a message of at most eagerMax bytes goes without a ready-to-receive.
// Every rank keeps, per peer, a ring of eagerSlots slots of eagerHdrRoom+eagerMax bytes
// in registered host memory (eagerPeer.ring), made once the peer's QP is usable, and
// announces it to the peer in a control message (slotRing) ahead of the first message
// it sends the peer. The sender owns a slot while it is free on its side (its credit):
// it RDMA-writes the header (slotEager: sequence number, post, tag, size, signature,
// root, slot) and the data into the slot in one write with immediate, whose immediate
// (eagerImm) names the slot, so one work request and one completion carry the message
// (from a copy in this rank's mirror of the ring where the source is host memory, so
// that the send is done when queued: outbox):
// over rxe each work request costs a round of the kernel's packet path, and a write
// followed by a header in a control slot made a 64-byte gather 4 packets where MPI
// sends 2. Where the header and the data's segments do not fit in one work request,
// the data goes in plain writes and the header follows in a control slot, on the same
// QP, so the data is in place when the header arrives. The
// receiver copies the slot into the destination when its receive runs (at once if it
// is running), and returns freed slots in batches (slotCredit, half a ring at a time,
// or at once when the sender says it ran out). A header that arrives before its post
// or its task is kept (team.early) with its slot, and matched when the receive starts;
// one for a post that is over is dropped and its slot freed. Bytes that a peer
// controls are checked before use: a slot index out of the ring, a size over the
// slot, a slot already held drop the message.
//
// A sender without a credit (or before the peer's ring is known) sends the header
// alone with the rts flag: the receiver answers with a ready-to-receive when its
// receive runs, and the data goes as on the rendezvous path (write with immediate
// into the destination). So a sender never waits for a credit, and data kept for
// collectives the receiver has not reached cannot block an earlier one.
//
// Mismatches: both sides take the eager path exactly when the size is at most
// eagerMax (a function of the team size), so ranks that agree never mix the paths.
// The receiver checks each header against its receive (peer, tag, size, signature,
// root) and fails the post on a difference; it also answers with a ready-to-receive
// carrying its own size, signature and root, so that the sender fails too (a sender
// takes any ready-to-receive for an eager send without rts as evidence). In a
// v-collective the sizes are each rank's own, so a sender past eagerMax may meet a
// receiver that expects an eager message: it tells its size in a header (tellSize).

// eagerPeer is the eager state of one peer: this rank's ring for the peer's writes,
// and this rank's credits in the peer's ring.
type eagerPeer struct {
	ring  hostRegion
	buf   lbuf     // the ring as a local buffer: the source of the copies out
	held  []bool   // per slot of ring: a message sits there, not consumed yet
	freed []uint16 // slots consumed and not yet returned to the peer

	announced bool // this rank's ring went to the peer

	known bool // the peer's ring arrived
	raddr uint64
	rkey  uint32
	free  []uint16 // slots of the peer's ring this rank may write
	busy  []bool   // per slot of the peer's ring: written, not yet returned

	// out mirrors the peer's ring on this side: a message copied into slot s here
	// (header, then data) goes from there into the peer's slot s in one write, and
	// the send is done when queued (outbox).
	out    hostRegion
	outSGE [][]verbs.SGE // per slot of out: its write's one SGE
}

// eagerUp gives peer pe its ring (announce sends it). It is called once per peer,
// when its QP becomes usable.
func (t *team) eagerUp(pe *peer) error {
	if t.eagerSlots == 0 {
		return nil
	}
	size := t.eagerSlots * t.eagerStride()
	ring, err := newHostRegion(t.c.pd, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return fmt.Errorf("tlmlx5: eager ring for rank %d: %w", pe.rank, err)
	}
	e := &eagerPeer{ring: ring, held: make([]bool, t.eagerSlots), freed: make([]uint16, 0, t.eagerSlots)}
	e.buf = lbuf{addr: uintptr(ring.addr(0)), n: size, typ: mem.Host, mr: ring.mr, host: ring.mem}
	// The mirror of the peer's ring (outbox), made with the link like the ring, so
	// that a link's memory is all there once it is up. Without it the sends write
	// from their sources.
	if out, err := newHostRegion(t.c.pd, size, verbs.AccessLocalWrite); err == nil {
		e.out = out
		e.outSGE = make([][]verbs.SGE, t.eagerSlots)
		for i := range e.outSGE {
			e.outSGE[i] = []verbs.SGE{{Addr: out.addr(i * t.eagerStride()), LKey: out.mr.LKey()}}
		}
	}
	pe.eager = e
	return nil
}

// announce puts the ring's announcement at the head of a chain to pe: it goes with
// the first message this rank sends to pe, never alone, so that a rank that never
// talks to a peer sends it nothing (a peer that closed its team early must not see a
// write from a rank that had nothing to say to it). Until then pe asks for
// ready-to-receives, and the first one it gets carries the ring.
func (t *team) announce(pe *peer, b []verbs.SendWR) []verbs.SendWR {
	e := pe.eager
	if e == nil || e.announced || len(pe.ctlFree) == 0 {
		return b
	}
	e.announced = true
	s := pe.ctlFree[len(pe.ctlFree)-1]
	pe.ctlFree = pe.ctlFree[:len(pe.ctlFree)-1]
	off := int(s) * slotSize
	m := ringMsg{addr: e.ring.addr(0), rkey: e.ring.mr.RKey(), slots: len(e.held), size: t.eagerMax}
	n := len(m.encode(pe.sb.mem[off : off+slotSize]))
	sge := pe.ctlSGE[s]
	sge[0].Length = uint32(n)
	return append(b, verbs.SendWR{ID: uint64(ctlID(pe.rank, int(s))), Op: verbs.OpSend, SGE: sge, Signaled: true})
}

func (e *eagerPeer) close() error {
	if err := e.out.close(); err != nil {
		return err
	}
	return e.ring.close()
}

// eagerStride is the size of one ring slot: the header's room, then the data.
func (t *team) eagerStride() int { return eagerHdrRoom + t.eagerMax }

// eager reports whether a message of n bytes takes the eager path on this team.
func (t *team) eager(n int) bool { return t.eagerSlots > 0 && n <= t.eagerMax }

// onRing takes the peer's ring: every slot is a credit. Only the first one counts.
func (t *team) onRing(r int, m ringMsg) {
	pe := t.peers[r]
	if pe == nil || pe.eager == nil || pe.eager.known || m.size != t.eagerMax || m.slots < 1 || m.slots > maxEagerSlots {
		return
	}
	e := pe.eager
	e.known, e.raddr, e.rkey = true, m.addr, m.rkey
	e.busy = make([]bool, m.slots)
	e.free = make([]uint16, 0, m.slots)
	for s := m.slots - 1; s >= 0; s-- {
		e.free = append(e.free, uint16(s))
	}
}

// onCredit gives back the slots of the peer's ring that it consumed.
func (t *team) onCredit(r int, slots []uint16) {
	pe := t.peers[r]
	if pe == nil || pe.eager == nil || !pe.eager.known {
		return
	}
	e := pe.eager
	for _, s := range slots {
		if int(s) < len(e.busy) && e.busy[s] {
			e.busy[s] = false
			e.free = append(e.free, s)
		}
	}
}

// takeCredit takes a free slot of peer pe's ring, or reports that there is none.
func (pe *peer) takeCredit() (int, bool) {
	e := pe.eager
	if e == nil || len(e.free) == 0 {
		return 0, false
	}
	s := e.free[len(e.free)-1]
	e.free = e.free[:len(e.free)-1]
	e.busy[s] = true
	return int(s), true
}

// unsent gives back a credit whose write never left (its post ended first).
func (pe *peer) unsent(slot int) {
	if e := pe.eager; e != nil && slot < len(e.busy) && e.busy[slot] {
		e.busy[slot] = false
		e.free = append(e.free, uint16(slot))
	}
}

// release frees slot s of peer pe's ring in this rank; the freed slots go back to the
// peer half a ring at a time, or at once with now (the peer ran out).
func (t *team) release(pe *peer, s int, now bool) {
	e := pe.eager
	if s >= 0 && s < len(e.held) && e.held[s] {
		e.held[s] = false
		e.freed = append(e.freed, uint16(s))
	}
	if len(e.freed) == 0 || (!now && 2*len(e.freed) < len(e.held)) || pe.down {
		return
	}
	for len(e.freed) > 0 {
		it := pe.queue.push()
		it.kind = itemCtl
		m := min(len(e.freed), maxCredits)
		it.n = len(encodeCredit(it.payload[:], e.freed[:m]))
		e.freed = append(e.freed[:0], e.freed[m:]...)
	}
}

// onEager routes an eager header of peer r: to the receive waiting for it, or into
// team.early until that receive starts; a header of a post that is over frees its
// slot.
func (t *team) onEager(m eagerHdr) {
	pe := t.peers[m.peer]
	if pe == nil || pe.eager == nil {
		return
	}
	e := pe.eager
	switch {
	case m.slot != noSlot:
		if m.slot >= len(e.held) || m.n > t.eagerMax || e.held[m.slot] {
			return // malformed: no such slot, or one that holds a message
		}
		e.held[m.slot] = true
	case !m.rts && !m.size:
		return // malformed: every message but a rendezvous request or a size comes in a slot
	}
	if m.rts {
		t.release(pe, noSlot, true) // it ran out of credits
	}
	k := t.tasks[m.seq]
	if k == nil {
		if next := t.p.NextSeq(); m.seq >= next && m.seq-next < SeqWindow {
			t.hold(pe, m)
			return
		}
		t.release(pe, m.slot, false)
		return
	}
	if o := k.checkEager(m); o != nil && !m.size {
		k.eagerArrived(o, m)
	}
	// A size that agrees says nothing more: its data comes the rendezvous way.
}

// hold keeps header m until its receive starts: one per slot of the peer's ring, and
// rendezvous requests, which a sender makes without a credit and then waits for this
// rank's answer, so one per open collective and tag at most. Past maxEarly kept
// headers the peer is failed: a flood, or more than maxEarlyHeaders collectives open
// at once whose rendezvous requests came before this rank started them.
func (t *team) hold(pe *peer, m eagerHdr) {
	if len(t.early) >= t.maxEarly {
		t.release(pe, m.slot, false)
		t.peerFailed(pe, fmt.Errorf("rank %d sent more than %d eager messages ahead of this rank", pe.rank, t.maxEarly))
		return
	}
	t.early = append(t.early, m)
}

// checkEager compares header m with this task's receive: a difference is evidence of
// a mismatch, which fails m's post (now, or when it starts) and goes back to the
// sender as a ready-to-receive; m's slot is freed then. It returns the receive, or nil.
func (k *task) checkEager(m eagerHdr) *op {
	var why string
	var o *op
	switch {
	case m.tag >= len(k.recvByTag) || k.recvByTag[m.tag] < 0:
		why = fmt.Sprintf("rank %d sends tag %d, which rank %d does not receive (the ranks run different collectives, roots or algorithms; rank %d runs %s)",
			m.peer, m.tag, k.t.rank, k.t.rank, k.alg)
	default:
		o = &k.ops[k.recvByTag[m.tag]]
		switch {
		case o.peer != m.peer:
			why = fmt.Sprintf("rank %d sends tag %d, which rank %d receives from rank %d", m.peer, m.tag, k.t.rank, o.peer)
		case m.n != o.n: // the sizes say more than the signatures (counts are in both)
			why = fmt.Sprintf("rank %d sends %s for tag %d, rank %d expects %s", m.peer, k.peerAmount(m.n, m.sig), m.tag, k.t.rank, k.amount(o.n))
		case m.sig != k.sig:
			why = fmt.Sprintf("rank %d runs a different collective, count or algorithm than rank %d's %v %s", m.peer, k.t.rank, k.spec.Type, k.alg)
		}
	}
	if why == "" {
		k.seen(m.peer)
		return o
	}
	pe := k.t.peers[m.peer]
	k.t.release(pe, m.slot, false)
	ev := rtr{peer: m.peer, seq: m.seq, post: m.post, tag: m.tag, sig: m.sig, root: m.root}
	switch {
	case k.started && m.post == k.post:
		k.mismatch(ev, why)
	case (!k.started || m.post > k.post) && !k.hasStray:
		k.stray, k.strayWhy, k.hasStray = ev, why, true
	}
	// Tell the sender: it fails on a ready-to-receive for an eager send.
	n := 0
	if o != nil {
		n = o.n
	}
	if !pe.down {
		it := pe.queue.push()
		it.kind = itemCtl
		back := rtr{seq: m.seq, post: m.post, tag: m.tag, n: n, sig: k.sig, root: k.root(), refused: true}
		it.n = len(back.encode(it.payload[:]))
	}
	return nil
}

// eagerArrived is a checked header for receive o: its data goes in now if o waits
// for it, or waits for o's post.
func (k *task) eagerArrived(o *op, m eagerHdr) {
	pe := k.t.peers[m.peer]
	switch {
	case m.post < k.post && k.started, k.aborted && m.post == k.post:
		k.t.release(pe, m.slot, false) // its post is over here
	case !k.started || m.post > k.post || o.state == opIdle:
		k.t.hold(pe, m)
	case o.state == opPosted && o.eager && !o.rts:
		if k.eagerIn(o, m) {
			k.run()
		}
	default:
		k.t.release(pe, m.slot, false)
		k.fail(fmt.Errorf("tlmlx5: %v #%d: %w: unexpected eager data for tag %d from rank %d", k.spec.Type, k.seq, driver.ErrMismatch, m.tag, m.peer))
	}
}

// eagerIn delivers m into receive o: a rendezvous request gets its ready-to-receive;
// data is copied out of its slot, which is freed. It reports whether o is done.
func (k *task) eagerIn(o *op, m eagerHdr) bool {
	pe := k.t.peers[o.peer]
	if m.rts {
		o.rts = true
		k.t.sendRTR(k, o)
		return false
	}
	if m.slot != noSlot {
		err := k.copySeg(o.out, sg(&pe.eager.buf, m.slot*k.t.eagerStride()+eagerHdrRoom, o.n))
		k.t.release(pe, m.slot, false)
		if err != nil {
			k.fail(fmt.Errorf("tlmlx5: %v #%d: copy out of the eager ring: %w", k.spec.Type, k.seq, err))
			return false
		}
	}
	k.opDoneLocal(o)
	return true
}

// eagerRecv starts eager receive o: the header that came first, if any, is taken now.
func (k *task) eagerRecv(o *op) {
	t := k.t
	for i := range t.early {
		m := &t.early[i]
		if m.peer == o.peer && m.seq == k.seq && m.post == k.post && m.tag == o.tag {
			h := *m
			t.early = slices.Delete(t.early, i, i+1)
			k.eagerIn(o, h)
			return
		}
	}
}

// adoptEarly checks the headers kept for this task's sequence number (NewTask), and
// drops those of sequence numbers below it that no task took.
func (k *task) adoptEarly() {
	t := k.t
	for i := 0; i < len(t.early); {
		m := t.early[i]
		switch {
		case m.seq == k.seq:
			if k.checkEager(m) == nil || m.size { // checkEager freed its slot; a size is checked and done
				t.early = slices.Delete(t.early, i, i+1)
				continue
			}
		case m.seq < k.seq && t.tasks[m.seq] == nil:
			t.early = slices.Delete(t.early, i, i+1)
			t.release(t.peers[m.peer], m.slot, false)
			continue
		}
		i++
	}
}

// dropEarly frees the kept headers of this task's posts before post (all with
// post 0: the task closes).
func (k *task) dropEarly(post uint32) {
	t := k.t
	for i := 0; i < len(t.early); {
		if m := t.early[i]; m.seq == k.seq && (post == 0 || m.post < post) {
			t.early = slices.Delete(t.early, i, i+1)
			t.release(t.peers[m.peer], m.slot, false)
			continue
		}
		i++
	}
}

// tellSize sends a header that only tells the size of rendezvous send o, where the
// receiver may have taken the message for an eager one and wait for a header: in a
// v-collective (spec.Block < 0), whose counts are each rank's own and not in the
// signature, a receiver that expects at most eagerMax bytes sends no ready-to-receive,
// and this rank, which sends more, waits for one; without this header nothing would
// cross the wire until the deadline. The receiver checks the size (checkEager): a
// difference fails its post and goes back as a ready-to-receive with its own size,
// which fails this one; an agreeing size is dropped. It goes once per post, and not
// where the ready-to-receive is already here (a persistent receive's re-armed one: the
// receiver's size came with it).
func (k *task) tellSize(o *op) {
	if k.spec.Block >= 0 || k.t.eagerSlots == 0 || o.told == k.post {
		return
	}
	pe := k.t.link(o.peer)
	if pe.down || pe.eager == nil {
		return
	}
	o.told = k.post
	h := eagerHdr{seq: k.seq, post: k.post, tag: o.tag, n: o.n, sig: k.sig, root: k.root(), slot: noSlot, size: true}
	it := pe.queue.push()
	it.k, it.post = k, k.post
	it.kind = itemCtl
	it.n = len(h.encode(it.payload[:]))
}

// issueEager sends eager send o: data into a credit's slot of the receiver's ring,
// then the header; without a credit, the header alone asks for a ready-to-receive.
// A ready-to-receive that came for it without that request is evidence that the
// receiver expects something else.
func (k *task) issueEager(o *op) {
	if o.haveRTR == k.post {
		k.eagerNak(o, o.rtr)
		return
	}
	if !k.srcReady(o) {
		return
	}
	pe := k.t.link(o.peer)
	if pe.down {
		o.state = opWaitRTR // nothing goes to a peer that is down: the team is broken
		return
	}
	h := eagerHdr{seq: k.seq, post: k.post, tag: o.tag, n: o.n, sig: k.sig, root: k.root(), slot: noSlot}
	it := pe.queue.push()
	it.k, it.post = k, k.post
	s, ok := pe.takeCredit()
	if ok && o.n == 0 && !k.outbox(pe, o, h.inSlot(s), it) {
		// Zero bytes go only from the outbox (below), or as a rendezvous request.
		pe.unsent(s)
		ok = false
	}
	if !ok {
		h.rts = true
		it.kind = itemCtl
		it.n = len(h.encode(it.payload[:]))
		o.rts, o.state = true, opWaitRTR
		return
	}
	if o.n == 0 {
		// In the outbox, done here at once: the header is untied from the task, so it
		// leaves even if the post ends (the request closed, its task kept, the team
		// closed) before the link is up for sends. A receiver whose own link came up
		// first takes this rank's data and finishes while its zero-byte part for the
		// peer still queues; tied to the task, that header was dropped with it and the
		// peer waited out its deadline (the hour soak: a 5-rank alltoall of count 0,
		// then eager closes). A header of a post that is over is dropped by the
		// receiver. It holds a slot of the peer's ring like any message: a rank
		// whose part is empty runs ahead of the receiver by at most its credits,
		// then asks for a ready-to-receive and waits (a slotless header done at once
		// let it run thousands of posts ahead, and the receiver counted the headers
		// it kept as a peer's failure).
		return
	}
	h.slot = s
	if k.outbox(pe, o, h, it) {
		return
	}
	it.kind, it.op, it.wr = itemEager, o.idx, int32(s)
	it.n = len(h.encode(it.payload[:]))
	o.state = opPosted
	o.wrsLeft = len(o.ewrs)
}

// inSlot is h in slot s of the peer's ring.
func (h eagerHdr) inSlot(s int) eagerHdr {
	h.slot = s
	return h
}

// eagerCopyOut is a variable only so that tests can run the other paths, which
// write from the source.
var eagerCopyOut = true

// outbox sends eager send o with header h from a copy: header and data go into slot
// h.slot of this rank's mirror of the peer's ring (eagerPeer.out), and the queued
// item it, untied from the task, writes them from there. The send is done at once,
// as a zero-byte one is: its bytes are this rank's copy, so the source is the
// caller's again, and its Wait need not wait for the write's completion, which over
// a NIC is the peer's acknowledgement (a round trip; over rxe two passes through
// the kernel's packet path). A post that ends before the item leaves does not take
// it back: the receiver drops a message of a post that is over, and frees its slot.
// It reports false, and changes nothing, where the source is not host memory (its
// copy would be a driver call), or the mirror could not be made; the send then
// writes from the source and is done at its completion.
func (k *task) outbox(pe *peer, o *op, h eagerHdr, it *sendItem) bool {
	t := k.t
	e := pe.eager
	if !eagerCopyOut || e.out.mr == nil || h.slot >= t.eagerSlots {
		return false
	}
	for _, sg := range o.segs {
		if sg.b.dm != nil || !cpu(sg.b.typ) {
			return false
		}
	}
	base := h.slot * t.eagerStride()
	slot := e.out.mem[base : base+eagerHdrRoom+o.n]
	h.encode(slot[:eagerHdrRoom])
	at := eagerHdrRoom
	for _, sg := range o.segs {
		at += copy(slot[at:], sg.bytes())
	}
	it.k = nil
	it.kind, it.wr, it.n = itemEagerOut, int32(h.slot), len(slot)
	k.opDoneLocal(o)
	return true
}

// flushOutbox appends outbox item it to the chain b: one write with immediate from
// this rank's copy into the peer's ring slot, under control send slot cs (the flow
// control of every work request that consumes a receive at the peer; see
// flushEagerOne), which its completion frees.
func (t *team) flushOutbox(pe *peer, it *sendItem, b []verbs.SendWR, cs int32) []verbs.SendWR {
	s := int(it.wr)
	base := s * t.eagerStride()
	sge := pe.eager.outSGE[s]
	sge[0].Length = uint32(it.n)
	w := verbs.SendWR{ID: uint64(ctlID(pe.rank, int(cs))), Op: verbs.OpRDMAWriteWithImm, Imm: eagerImm(s),
		SGE: sge, Signaled: true, RemoteAddr: pe.eager.raddr + uint64(base), RKey: pe.eager.rkey}
	return append(b, w)
}

// eagerNak fails eager send o with the ready-to-receive the receiver answered with.
func (k *task) eagerNak(o *op, r rtr) {
	why := fmt.Sprintf("rank %d expects %s for tag %d, rank %d sends %s", r.peer, k.peerAmount(r.n, r.sig), o.tag, k.t.rank, k.amount(o.n))
	if r.sig != k.sig {
		why = fmt.Sprintf("rank %d runs a different collective, count or algorithm than rank %d's %v %s", r.peer, k.t.rank, k.spec.Type, k.alg)
	}
	k.mismatch(r, why)
}

// refusedWhy says what refused answer r to send o's header shows: the sizes where
// they differ (as a rendezvous send that took the answer would have said), else the
// collectives, else the peer.
func (k *task) refusedWhy(o *op, r rtr) string {
	switch {
	case r.n != o.n:
		return fmt.Sprintf("rank %d expects %s for tag %d, rank %d sends %s", r.peer, k.peerAmount(r.n, r.sig), o.tag, k.t.rank, k.amount(o.n))
	case r.sig != k.sig:
		return fmt.Sprintf("rank %d runs a different collective, count or algorithm than rank %d's %v %s", r.peer, k.t.rank, k.spec.Type, k.alg)
	}
	return fmt.Sprintf("rank %d refused rank %d's message for tag %d, although they agree on its size and the collective: rank %d receives that tag from another rank",
		r.peer, k.t.rank, o.tag, r.peer)
}

// buildEagerWRs makes the writes of eager send i: its segments in work requests of
// at most maxSGE SGEs; the slot's address is filled in when it is flushed.
func (k *task) buildEagerWRs(i int) {
	o := &k.ops[i]
	var cur verbs.SendWR
	off := 0
	for _, s := range o.segs {
		if len(cur.SGE) == maxSGE {
			o.ewrs = append(o.ewrs, cur)
			cur = verbs.SendWR{}
		}
		if len(cur.SGE) == 0 {
			o.eoffs = append(o.eoffs, uint64(off))
			cur.Op, cur.Signaled = verbs.OpRDMAWrite, true
		}
		cur.SGE = append(cur.SGE, verbs.SGE{Addr: uint64(s.b.addr) + uint64(s.off), Length: uint32(s.n), LKey: s.b.mr.LKey()})
		off += s.n
	}
	if len(cur.SGE) > 0 {
		o.ewrs = append(o.ewrs, cur)
	}
	o.eimm = o.eimm[:0]
	if len(o.ewrs) > 0 && len(o.ewrs[0].SGE) < maxSGE {
		o.eimm = append(append(o.eimm, verbs.SGE{}), o.ewrs[0].SGE...)
	}
}

// flushEager appends eager item it (its writes, then its header in control slot cs)
// to the chain b.
func (t *team) flushEager(pe *peer, it *sendItem, b []verbs.SendWR) []verbs.SendWR {
	k := it.k
	o := &k.ops[it.op]
	base := pe.eager.raddr + uint64(int(it.wr)*t.eagerStride()+eagerHdrRoom)
	for j := range o.ewrs {
		w := o.ewrs[j]
		w.RemoteAddr, w.RKey = base+o.eoffs[j], pe.eager.rkey
		b = append(b, w)
		k.outstanding++
	}
	return b
}

// eagerInOne reports whether eager item it goes as one write with its header: its
// first write has room for the header's SGE.
func (t *team) eagerInOne(it *sendItem) bool {
	return eagerOneWrite && len(it.k.ops[it.op].eimm) > 0
}

// eagerOneWrite is a variable only so that tests can run the other path: writes,
// then the header in a control slot.
var eagerOneWrite = true

// flushEagerOne appends eager item it to the chain b as writes whose last carries the
// header ahead of the first segments, into the slot's head, with the immediate that
// names the slot.
//
// That last write takes control send slot cs, as the header message of the two-step
// path does: its header's bytes sit in the slot's memory until it completes, and its
// work-request ID is the slot's, so that its completion frees the slot (and, through
// pe.ctlOp, completes the data operation). The slot is the flow control of every
// work request that consumes a receive at the peer: without it, eager writes to a
// peer that had not taken the earlier ones went onto the queue pair at once, where a
// peer that closed its team fails them (the hour soak's split barrier, 580158f);
// with it they wait in the send queue, which the news of a peer that left drops.
func (t *team) flushEagerOne(pe *peer, it *sendItem, b []verbs.SendWR, cs int32) []verbs.SendWR {
	k := it.k
	o := &k.ops[it.op]
	s := int(it.wr)
	head := pe.eager.raddr + uint64(s*t.eagerStride())
	for j := 1; j < len(o.ewrs); j++ {
		w := o.ewrs[j]
		w.RemoteAddr, w.RKey = head+eagerHdrRoom+o.eoffs[j], pe.eager.rkey
		b = append(b, w)
		k.outstanding++
	}
	off := int(cs) * slotSize
	copy(pe.sb.mem[off:off+it.n], it.payload[:it.n])
	o.eimm[0] = verbs.SGE{Addr: pe.sb.addr(off), Length: eagerHdrRoom, LKey: pe.sb.mr.LKey()}
	w := o.ewrs[0]
	w.ID, w.Signaled = uint64(ctlID(pe.rank, int(cs))), true
	w.Op, w.Imm, w.SGE = verbs.OpRDMAWriteWithImm, eagerImm(s), o.eimm
	w.RemoteAddr, w.RKey = head, pe.eager.rkey
	pe.ctlOp[cs] = ctlOp{task: k.id, op: it.op, set: true}
	k.outstanding++
	return append(b, w)
}

// onEagerWrite is the arrival of an eager write into slot s of peer r's ring: its
// header is at the slot's head. A header that does not decode, or that names another
// slot, is dropped, as a malformed control message is.
func (t *team) onEagerWrite(r, s int) {
	pe := t.peers[r]
	if pe == nil || pe.eager == nil || s >= len(pe.eager.held) {
		return
	}
	// The header sits at the slot's head. The peer rewrites the slot only after this
	// rank frees it and returns the credit (release), so it is stable until then.
	hdr := t.rbuf[:eagerHdrLen]
	off := s * t.eagerStride()
	copy(hdr, pe.eager.ring.mem[off:off+eagerHdrLen])
	m, err := decodeEager(r, hdr)
	if err != nil || m.slot != s || m.rts {
		return
	}
	t.onEager(m)
}
