package tlmlx5

import (
	"fmt"

	"github.com/ibcoll/ibcoll/verbs"
)

// Local copies out of NIC device memory go through the NIC where the device says that
// the CPU reads its memory through uncached loads (verbs.DeviceAttr.DMUncachedReads:
// every real device with device memory): an RDMA write on a QP of the team connected
// to itself. The CPU reads DM only through the provider's copy (ibv_memcpy_from_dm),
// which on mlx5 is uncached loads across PCIe, a few bytes per round trip: a gather
// root's own block of a DM source, or a DM-to-DM copy through the task's bounce
// buffer, would cost what its size in round trips does. The NIC reads its own memory
// at its own speed, and the copy is one work request. soft0's device memory is host
// memory, which the CPU copies faster than a work request's round trip through the
// CQ (docs/design.md, "On real mlx5 hardware"), so it keeps the CPU's copies unless
// opened with Options.SoftDMUncached, which tests use.
//
// A local copy into DM whose target starts or ends inside a word goes through the NIC
// too, on every device (viaNIC says why).
//
// Where the loopback QP cannot be made, or failed, copies go by the CPU (copySeg). A
// failure fails the posts whose copies were on the QP (their completions come back
// flushed: the device flushes what a QP in the error state held, and mlx5 makes those
// completions in software for a device in a fatal state); a copy still queued for room
// on the QP goes by the CPU instead.

// loopDepth bounds the loopback QP's send queue; every CQ of a team has room for its
// completions beside its peers' (cqFor).
const loopDepth = 16

// loopLink is the team's loopback QP, made at the first copy that needs it.
type loopLink struct {
	qp      *verbs.QP
	evFloor uint64   // the newest device event when the QP was made (events.go)
	posted  int      // work requests on the QP
	queue   []loopWR // copies waiting for room on the QP, in order
	down    error    // the QP could not be made, or failed: copies go by the CPU
	copies  uint64   // copies posted, over the team's life
}

// loopWR is a copy of operation op of task k, post post, waiting for room.
type loopWR struct {
	k    *task
	op   int32
	post uint32
}

// loop returns the team's loopback link, making it at the first call; nil where it is
// down.
func (t *team) loop() *loopLink {
	if t.lp == nil {
		t.lp = &loopLink{}
		if err := t.makeLoop(t.lp); err != nil {
			t.lp.down = err
		}
	}
	if t.lp.down != nil {
		return nil
	}
	return t.lp
}

func (t *team) makeLoop(l *loopLink) error {
	if t.ev.fatal != nil {
		return t.ev.fatal
	}
	// The team's first CQ, which newTeam made; it has room for the loopback's
	// completions beside its peers' and takes no peer's place (cqFor).
	cq := t.cqs[0]
	var err error
	l.qp, err = t.c.pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: loopDepth, MaxRecvWR: 1, MaxSGE: 1})
	if err != nil {
		return fmt.Errorf("tlmlx5: loopback QP: %w", err)
	}
	l.evFloor, _ = t.c.dev.LatestEvent()
	if err := l.qp.Connect(l.qp.Info()); err != nil {
		return fmt.Errorf("tlmlx5: loopback QP: %w", err)
	}
	return nil
}

// viaNIC reports whether local copy o goes through the loopback QP, where the NIC
// does better than the CPU, and o's target takes remote writes (every output does; a
// target registered for local access only would fail the write):
//   - its source is DM that the CPU reads through uncached loads (above);
//   - its target is DM and starts or ends inside a 4-byte word, and its source has
//     keys. The CPU writes DM in whole words (dm.Chunk's copies: a partial word is
//     read, patched and written back), so the other bytes of an edge word, which a
//     peer's RDMA write may be filling at that moment (a gather's neighbouring block),
//     could be written back stale; the NIC writes bytes. Not where an eager receive of
//     the task copies into the same chunk by the CPU (lbuf.eagerIn): a neighbouring
//     block then comes that way (the blocks are of one size class), and the CPU's
//     copies, one after the other on the task's thread, are the safe ones.
func (k *task) viaNIC(o *op) bool {
	if o.out.n == 0 || !o.out.b.remoteWritable() {
		return false
	}
	switch {
	case o.a.b.dm != nil && k.t.c.attr.DMUncachedReads:
	case o.out.b.dm != nil && !o.out.b.eagerIn && o.a.b.mr != nil && partialWords(o.out):
	default:
		return false
	}
	return k.t.loop() != nil
}

// partialWords reports whether s starts or ends inside a 4-byte word of its buffer's
// address space (a DM chunk's: chunks start on whole words).
func partialWords(s seg) bool {
	at := uint64(s.b.addr) + uint64(s.off)
	return at&3 != 0 || (at+uint64(s.n))&3 != 0
}

// remoteWritable reports whether the NIC may write b as a peer would: DM pool chunks
// and registrations with remote write.
func (b *lbuf) remoteWritable() bool {
	if b.dm != nil {
		return true // the pool registers with receiveAccess
	}
	return b.reg != nil && b.reg.key.access&verbs.AccessRemoteWrite != 0
}

// copyViaNIC starts local copy o on the loopback QP; its completion ends it (loopDone).
func (k *task) copyViaNIC(o *op) {
	l := k.t.lp
	if len(o.wrs) == 0 {
		o.wrs = []verbs.SendWR{{Op: verbs.OpRDMAWrite, SGE: make([]verbs.SGE, 1), Signaled: true}}
	}
	w := &o.wrs[0]
	w.ID = uint64(loopID(k.id, int(o.idx)))
	w.SGE[0] = verbs.SGE{Addr: uint64(o.a.b.addr) + uint64(o.a.off), Length: uint32(o.out.n), LKey: o.a.b.mr.LKey()}
	w.RemoteAddr, w.RKey = uint64(o.out.b.addr)+uint64(o.out.off), o.out.b.mr.RKey()
	o.state, o.wrsLeft = opPosted, 1
	k.outstanding++ // queued or posted: Close waits for it either way
	l.queue = append(l.queue, loopWR{k: k, op: o.idx, post: k.post})
	k.t.flushLoop()
}

// flushLoop posts the queued copies the loopback QP has room for. A copy of a post
// that ended (aborted, failed) is dropped unposted.
func (t *team) flushLoop() {
	l := t.lp
	if l == nil {
		return
	}
	for len(l.queue) > 0 && (l.posted < loopDepth || l.down != nil) {
		q := l.queue[0]
		l.queue = l.queue[1:]
		k, o := q.k, &q.k.ops[q.op]
		if k.aborted || k.err != nil || k.post != q.post {
			k.outstanding--
			o.state = opIdle
			continue
		}
		if l.down != nil {
			// It never reached the NIC: the CPU copies it.
			k.outstanding--
			t.copyByCPU(k, o)
			continue
		}
		if err := l.qp.PostSend(o.wrs[0]); err != nil {
			k.outstanding--
			t.loopFailed(err)
			t.copyByCPU(k, o)
			continue
		}
		l.posted++
		l.copies++
	}
	if len(l.queue) == 0 {
		l.queue = l.queue[:0:cap(l.queue)]
	}
}

// copyByCPU makes local copy o of task k, which the loopback did not take, with the
// CPU (copySeg), and moves the task on.
func (t *team) copyByCPU(k *task, o *op) {
	if err := k.copySeg(o.out, o.a); err != nil {
		o.state = opIdle
		k.fail(fmt.Errorf("tlmlx5: %v #%d: local copy: %w", k.spec.Type, k.seq, err))
		return
	}
	k.opDone(o)
}

// loopDone is the completion of a loopback copy: operation op of the task with ID id.
func (t *team) loopDone(wc *verbs.WC, id uint32, op int) {
	l := t.lp
	if l == nil {
		return // no loopback QP, so no copy of its: nothing to end
	}
	l.posted--
	k := t.byID[id]
	if k != nil {
		k.outstanding--
	}
	if wc.Status != verbs.WCSuccess {
		err := wc.Err()
		if l.down != nil {
			err = fmt.Errorf("%w; %w", l.down, err) // what took it down, then the flush
		}
		t.loopFailed(err)
		if k != nil && !k.aborted {
			k.ops[op].state = opIdle
			k.fail(fmt.Errorf("tlmlx5: %v #%d: local copy through the NIC: %w", k.spec.Type, k.seq, err))
		}
	} else if k != nil && !k.aborted && k.err == nil {
		o := &k.ops[op]
		if o.wrsLeft--; o.wrsLeft == 0 {
			k.opDone(o)
		}
	}
	t.flushLoop()
}

// loopFailed takes the loopback QP down: what is in flight flushes, and later copies
// go by the CPU. The failure is the posts' whose copies it ended; no link fails.
func (t *team) loopFailed(err error) {
	l := t.lp
	if l == nil || l.down != nil {
		return
	}
	l.down = fmt.Errorf("the loopback QP failed: %w", err)
	if l.qp != nil {
		// A QP that will not move has failed already, or its device has: either
		// way its copies complete flushed or not at all, as a peer's do.
		_ = l.qp.MoveToError()
	}
}

// ofQP reports whether e names the loopback QP (peer.ofQP).
func (l *loopLink) ofQP(e verbs.AsyncEvent) bool {
	return l != nil && l.qp != nil && l.qp.QPN() == e.QPN && e.Seq > l.evFloor
}

// closeLoop destroys the loopback QP, before the memory its copies touched.
func (t *team) closeLoop() error {
	if t.lp == nil || t.lp.qp == nil {
		return nil
	}
	if err := t.lp.qp.Close(); err != nil {
		return err
	}
	t.lp.qp = nil
	return nil
}
