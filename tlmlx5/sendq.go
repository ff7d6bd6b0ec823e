package tlmlx5

import (
	"fmt"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/verbs"
)

// The send side of a peer: control messages and data writes queue in order in a ring
// and are posted as one chain (one doorbell) as far as the send queue has room. A
// message never overtakes what was queued before it: an abort never passes the data it
// stops.

// sendRing is a FIFO of queued sends that grows when full: steady state reuses it.
type sendRing struct {
	items      []sendItem
	head, size int
}

type itemKind uint8

const (
	itemCtl itemKind = iota + 1
	itemData
	itemEager    // eager send op into the receiver's ring slot wr, its header in payload
	itemEagerOut // a copied eager message in slot wr of this rank's mirror of the receiver's ring, n bytes (outbox)
)

// sendItem is a queued send: a control message (payload, n bytes), or work request wr
// of operation op of task k; k and post drop the item when the task's post is over.
type sendItem struct {
	kind itemKind
	k    *task
	post uint32
	op   int32
	wr   int32
	n    int
	// ahead: a ready-to-receive for post, sent before the task reached it (ahead.go);
	// it goes out after the task moved on to that post too.
	ahead   bool
	payload [slotSize]byte
}

func (r *sendRing) init(n int) { r.items = make([]sendItem, n) }
func (r *sendRing) len() int   { return r.size }

func (r *sendRing) push() *sendItem {
	if r.size == len(r.items) {
		items := make([]sendItem, 2*len(r.items))
		for i := 0; i < r.size; i++ {
			items[i] = r.items[(r.head+i)%len(r.items)]
		}
		r.items, r.head = items, 0
	}
	it := &r.items[(r.head+r.size)%len(r.items)]
	r.size++
	// op names a receive only where the pusher says so (an RTR): a stale one would make
	// an RTS or another task's message pass for that receive's RTR (unsentRTR).
	it.k, it.ahead, it.op = nil, false, -1
	return it
}

func (r *sendRing) front() *sendItem { return &r.items[r.head] }

func (r *sendRing) pop() {
	r.items[r.head].k = nil
	r.head = (r.head + 1) % len(r.items)
	r.size--
}

func (r *sendRing) clear() {
	for r.size > 0 {
		r.pop()
	}
}

// SendCtl queues a control message of coll.
func (t *team) SendCtl(p int, msg []byte) error {
	if len(msg) > slotSize-1 {
		return fmt.Errorf("tlmlx5: control message of %d bytes, max %d: %w", len(msg), slotSize-1, driver.ErrInvalid)
	}
	if p < 0 || p >= t.size {
		return fmt.Errorf("tlmlx5: control message to rank %d of %d: %w", p, t.size, driver.ErrInvalid)
	}
	if p == t.rank {
		return fmt.Errorf("tlmlx5: control message to rank %d, this rank: %w", p, driver.ErrInvalid)
	}
	pe := t.link(p)
	if pe.down {
		return fmt.Errorf("tlmlx5: rank %d is down", p)
	}
	it := pe.queue.push()
	it.kind = itemCtl
	it.n = 1 + copy(it.payload[1:], msg)
	it.payload[0] = slotColl
	t.flush(pe)
	return nil
}

// sendRTR queues a ready-to-receive: this rank's buffer for receive o of task k.
func (t *team) sendRTR(k *task, o *op) { t.queueRTR(k, o, k.post, false) }

// queueRTR queues the ready-to-receive of receive o for post (ahead: a post that task k
// has not started, ahead.go), and reports whether it did (not to a peer that is down).
func (t *team) queueRTR(k *task, o *op, post uint32, ahead bool) bool {
	pe := t.link(o.peer)
	if pe.down {
		return false
	}
	it := pe.queue.push()
	it.kind = itemCtl
	it.k, it.post, it.ahead = k, post, ahead
	it.op = o.idx
	dst := k.regionFor(o, post)
	m := rtr{seq: k.seq, post: post, tag: o.tag, addr: dst.addr, rkey: dst.rkey, n: o.n, sig: k.sig, root: k.root()}
	it.n = len(m.encode(it.payload[:]))
	return true
}

// flushQueued posts what every linked peer's send queue holds, and says whether any
// held something.
func (t *team) flushQueued() bool {
	queued := false
	for _, pe := range t.linked { // every peer with an entry: O(links), not O(n)
		if pe.queue.len() > 0 {
			t.flush(pe)
			queued = true
		}
	}
	return queued
}

// flush posts what the send queue of pe has room for, in order, as one chain.
func (t *team) flush(pe *peer) {
	if pe.down || pe.link.state != linkReady {
		return // a link being made flushes when it is ready (peerReady)
	}
	b := pe.batch[:0]
	if pe.queue.len() > 0 && pe.posted < sqDepth {
		b = t.announce(pe, b)
	}
	for pe.queue.len() > 0 && pe.posted+len(b) < sqDepth {
		it := pe.queue.front()
		if it.k != nil && (it.k.aborted || it.k.post != it.post && !(it.ahead && it.k.post+1 == it.post)) {
			if it.kind == itemEager {
				pe.unsent(int(it.wr))
			}
			if it.kind == itemCtl && it.k != retired {
				it.k.unsentRTR(it.op, it.post, it.ahead)
			}
			pe.queue.pop()
			continue
		}
		if it.kind == itemEager && pe.posted+len(b)+len(it.k.ops[it.op].ewrs)+1 > sqDepth {
			break
		}
		if it.kind != itemData {
			if len(pe.ctlFree) == 0 {
				break
			}
			s := pe.ctlFree[len(pe.ctlFree)-1]
			pe.ctlFree = pe.ctlFree[:len(pe.ctlFree)-1]
			switch {
			case it.kind == itemEagerOut:
				b = t.flushOutbox(pe, it, b, s)
				t.eagerSent[0]++
				pe.queue.pop()
				continue
			case it.kind == itemEager && t.eagerInOne(it):
				b = t.flushEagerOne(pe, it, b, s)
				t.eagerSent[1]++
				pe.queue.pop()
				continue
			case it.kind == itemEager:
				b = t.flushEager(pe, it, b)
				t.eagerSent[2]++
			}
			off := int(s) * slotSize
			copy(pe.sb.mem[off:off+it.n], it.payload[:it.n])
			sge := pe.ctlSGE[s]
			sge[0].Length = uint32(it.n)
			b = append(b, verbs.SendWR{ID: uint64(ctlID(pe.rank, int(s))), Op: verbs.OpSend, SGE: sge, Signaled: true})
		} else {
			b = append(b, it.k.ops[it.op].wrs[it.wr])
			it.k.outstanding++
		}
		pe.queue.pop()
	}
	if len(b) == 0 {
		return
	}
	pe.batch = b[:0]
	if err := pe.qp.PostSend(b...); err != nil {
		// The provider may have taken the front of the chain before refusing a
		// request: those complete (flushed, once peerFailed moves the QP to
		// error) and are accounted for then. The rest never reach the QP, so
		// their tasks stop waiting for them here; the QP cannot be trusted.
		posted := min(max(verbs.PostedBefore(err), 0), len(b))
		pe.posted += posted
		for i := posted; i < len(b); i++ {
			task, ok := uint32(0), false
			switch id := wrID(b[i].ID); id.kind() {
			case wrData:
				task, ok = id.task(), true
			case wrCtl:
				if ref := &pe.ctlOp[id.index()]; ref.set {
					task, ok = ref.task, true
					*ref = ctlOp{}
				}
			}
			if k := t.byID[task]; ok && k != nil {
				k.outstanding--
			}
		}
		t.peerFailed(pe, err)
		return
	}
	pe.posted += len(b)
}

// ctlOp names the operation whose eager write holds a control send slot: the slot's
// completion is that write's (flushEagerOne).
type ctlOp struct {
	task uint32
	op   int32
	set  bool
}
