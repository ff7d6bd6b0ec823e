package tlmlx5

import (
	"errors"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
)

// Ready-to-receives sent ahead. A persistent collective's receive into scratch of the
// transport's own gets two buffers, and post p uses buffer p mod 2. When post p starts,
// the receive sends its ready-to-receive for post p+1 too, naming the other buffer,
// which post p-1 finished with. Its sender then holds the RTR of its next post before
// it gets there, and writes as soon as it posts: the RTR's flight, and the wake-up of
// a sender blocked on it, leave the critical path, and a sender that runs ahead of its
// receiver by a post finds the receiver's data in place when the receiver posts.
// Measured on soft0 (docs/design.md, "Ready-to-receives sent ahead"): the flight and
// the wake-ups were most of a 16-64 KiB persistent reduction's time. Sending the RTR
// of p+1 at the end of post p instead, into the same buffer, saved almost nothing:
// the sender, faster than a receiver that folds, was already waiting for it then.
//
// Which receives:
//   - into transport scratch that only reductions and local copies read: nothing
//     touches it between posts, and the readers find the buffer of the post they run
//     (lbuf.alt, flipped at Post). The user's Dst may not be written before the Post
//     that covers it (TestNoWriteBeforePost), and a send's work requests name fixed
//     addresses, so neither is doubled;
//   - or into a persistent collective's staged output (coll's staging scratch, which
//     only its copy-out reads: TaskSpec.Landed is set), when every write into it is a
//     receive that arms ahead or a local copy (a gather root's own block): the task
//     then holds that output in two buffers of its own (doubleOutput) and tells coll
//     which one holds a post's (Output, driver.OutputOwner), so that peers write post
//     p+1 while coll still copies post p out (on the H200, a staged gather root's
//     children waited for its ready-to-receive until the copy-out of the last post
//     had ended: docs/design.md, "Staged outputs a post ahead");
//   - ndeps == 0: the receive starts at the beginning of every post, so its buffer is
//     exposed then anyway;
//   - one write with immediate (no landing pieces), into scratch: data that arrives
//     before its post is one event, kept in one bit (aheadIn); this also bounds the
//     extra memory by 2 × landPiece per receive. A staged output's receives take
//     landing pieces too: those that come before their post are counted
//     (aheadPieces) and reported landed when it starts; the memory is bounded by
//     aheadOutMax;
//   - rendezvous: an eager receive needs no ready-to-receive. An eager or empty
//     receive into a staged output still lets the output take two buffers
//     (writesInPost), as long as some receive into it arms ahead: it writes only
//     during its post, into that post's buffer.
//
// The sender keeps up to two RTRs of posts it has not reached (op.nextRTR), of p+1 and
// p+2 while it still waits for p's completion. Whoever holds an RTR can write into its
// buffer until its data lands. A peer uses the RTR of p+1 only when it posts p+1,
// which coll allows only after its own post p succeeded, so after a failed post it may
// be idle for as long as its program likes. Writers therefore leaves these exposures
// out, and a failed task's Close keeps the buffers still exposed (quarantine.go)
// instead of freeing them, until the peer writes or answers, rather than wait for such
// a peer's acknowledgement. A
// rank that posts a request more times than its peers (a program error) may therefore
// complete that extra post, its data landing in scratch nobody reads; where the
// receiver closed the request, the write meets deregistered memory and breaks the
// link. The same extra post of a message small enough to go eagerly completes too.

// canArmAhead reports whether receive o of task k, in its own right, may take two
// buffers and send the RTR of the next post ahead; doubleBuffers checks the rest.
func (k *task) canArmAhead(o *op) bool {
	if !k.spec.Persistent || o.kind != opRecv || o.eager || o.ndeps != 0 || o.n == 0 || o.out.n != o.n || o.out.b == nil || o.out.b.dm != nil {
		return false
	}
	if k.doublesOut(o.out.b) {
		return true // landing pieces too: staged output (below)
	}
	return o.out.b.own != nil && o.n < 2*pieceOf(o.n)
}

// writesInPost reports whether receive o into a staged output writes it only while
// its post runs, so that the output may still take two buffers although o arms
// nothing ahead: an eager receive copies its slot into the buffer of the post it runs
// in (a message that comes before its post waits in the ring), and an empty one
// writes nothing.
func (k *task) writesInPost(o *op) bool {
	return o.out.b != nil && k.doublesOut(o.out.b) && (o.eager || o.n == 0)
}

// doublesOut reports whether b is an output that may take two buffers of the
// transport's own: the staged output of a persistent collective (TaskSpec.Landed is set
// only where the output is coll's staging scratch, read by nothing but the copy-out of
// what this transport reports landed and of the rest at the end; driver.OutputOwner),
// not in place (an in-place root's own block is copied into that scratch before the
// post), host memory, at most aheadOutMax bytes.
func (k *task) doublesOut(b *lbuf) bool {
	return k.spec.Persistent && k.landed != nil && !k.spec.InPlace && b == k.out && b.own == nil && b.dm == nil &&
		b.typ == mem.Host && b.reg != nil && b.n > 0 && b.n <= aheadOutMax
}

// doubleBuffers gives every receive that can arm ahead a second buffer: the scratch it
// receives into gets an alternate of the same size, when every receive into that
// scratch can arm ahead (or, into a staged output, at least one does and the others
// write only during their post: writesInPost) and no other operation writes it or
// sends from it.
func (k *task) doubleBuffers() error {
	if !k.spec.Persistent {
		return nil
	}
	var order []*lbuf
	ok := map[*lbuf]bool{}
	recvs := map[*lbuf]bool{} // an output only local copies write gains nothing
	note := func(b *lbuf, can bool) {
		if b == nil || (b.own == nil && !k.doublesOut(b)) {
			return
		}
		if was, seen := ok[b]; seen {
			ok[b] = was && can
			return
		}
		ok[b] = can
		order = append(order, b)
	}
	for i := range k.ops {
		switch o := &k.ops[i]; o.kind {
		case opRecv:
			o.armsAhead = k.canArmAhead(o) // kept only where o.out.b is doubled (below)
			note(o.out.b, o.armsAhead || k.writesInPost(o))
			recvs[o.out.b] = recvs[o.out.b] || o.armsAhead
		case opSend:
			for _, s := range o.segs {
				note(s.b, false)
			}
		case opCopy:
			note(o.out.b, k.doublesOut(o.out.b)) // a root's own block, copied into the post's buffer
		default:
			note(o.out.b, false)
		}
	}
	for _, b := range order {
		if !ok[b] || !recvs[b] {
			continue
		}
		if b.own == nil {
			if err := k.doubleOutput(b); err != nil {
				return err
			}
			continue
		}
		alt, err := k.scratch(b.n) // as the builder made b: the same faults count it
		if err != nil {
			return err
		}
		b.alt = alt
		k.doubled = append(k.doubled, b)
	}
	for i := range k.ops {
		if o := &k.ops[i]; o.kind == opRecv && (o.out.b == nil || o.out.b.alt == nil) {
			o.armsAhead = false
		}
	}
	return nil
}

// doubleOutput gives the staged output b two buffers of the transport's own, pinned
// where the staging scratch is (for the copy engine that copies them out), instead of
// the staging scratch and a second one: a receive sent ahead exposes the buffer of the
// next post, and after a failed post Close must be able to keep that buffer until the
// peer writes or answers (quarantine.go), which it can do only with its own memory. The
// staging scratch is then unused while the task lives; its registration moves to the
// lbuf that first was, in k.bufs, and is released with the task.
//
// They are registered as coll's scratch was (written by peers, read by the copy-out:
// no HintOwnerReads, so soft0 writes an unpinned one as it wrote that scratch). A
// buffer the CUDA driver does not pin (a locked-memory limit, say) leaves the output
// as it was, single: the buffers are a speed-up, and the copy engine reads pageable
// memory at a fifth of the speed. Failures to allocate or register fail the task, as
// for any scratch.
func (k *task) doubleOutput(b *lbuf) error {
	first, err := k.newScratch(b.n, b.stream, receiveAccess)
	if errors.Is(err, errNoPin) {
		return nil
	} else if err != nil {
		return err
	}
	second, err := k.newScratch(b.n, b.stream, receiveAccess)
	if errors.Is(err, errNoPin) {
		return k.dropScratch(first)
	} else if err != nil {
		return err
	}
	// Fault their pages in now (pinning did where it ran): the first post into each
	// would otherwise pay the page faults, on the wire's critical path (a 4-rank sim
	// gather of 600 KB blocks took 8-13 ms at post 2, 0.3 ms after).
	for _, lb := range []*lbuf{first, second} {
		for i := 0; i < len(lb.host); i += 4096 {
			lb.host[i] = 0
		}
	}
	*b, *first = *first, *b
	b.typ = first.typ
	b.alt = second
	k.doubled = append(k.doubled, b)
	k.outDoubled = true
	return nil
}

// Output is the buffer that holds post's output where the task writes its staged
// output into buffers of its own (doubleOutput), nil where it writes the spec's
// (driver.OutputOwner).
func (k *task) Output(post uint32) *mem.Buffer {
	if !k.outDoubled {
		return nil
	}
	if b := k.out; post%2 == b.side {
		return b.own
	}
	return k.out.alt.own
}

var _ driver.OutputOwner = (*task)(nil)

// flip makes the buffers of post the current ones: b holds buffer post mod 2, b.alt
// the other.
func (b *lbuf) flip(post uint32) {
	if side := post % 2; side != b.side {
		a := b.alt
		b.addr, a.addr = a.addr, b.addr
		b.host, a.host = a.host, b.host
		b.mr, a.mr = a.mr, b.mr
		b.reg, a.reg = a.reg, b.reg
		b.own, a.own = a.own, b.own
		b.side = side
	}
}

// regionFor is where receive o's data for post lands, as its RTR names it.
func (k *task) regionFor(o *op, post uint32) region {
	b := o.out.b
	if b.alt == nil {
		return o.dst
	}
	if post%2 != b.side {
		b = b.alt
	}
	return region{addr: uint64(b.addr) + uint64(o.out.off), rkey: b.mr.RKey()}
}

// startAhead starts receive o that arms ahead: it asks for this post's data unless its
// RTR went out ahead (and is done at once if that data came already), and sends the
// RTR of the next post, into the other buffer.
func (k *task) startAhead(o *op) {
	took := o.ahead == k.post
	landed := took && o.aheadIn
	pieces := 0
	if took {
		k.tookAhead++
		pieces = int(o.aheadPieces)
	} else {
		k.t.queueRTR(k, o, k.post, false)
	}
	o.ahead, o.aheadIn, o.aheadPieces = 0, false, 0
	if next := k.post + 1; next != 0 && k.t.queueRTR(k, o, next, true) {
		o.ahead = next
		k.armedAhead++
	}
	switch {
	case landed:
		k.landedAhead++
		k.opDoneLocal(o)
	case pieces > 0:
		// The first landing pieces came before the post: in place, and final.
		o.landed = pieces * pieceOf(o.n)
		k.pieces += pieces
		k.piecesAhead += pieces
		if o.out.b == k.out && k.landed != nil {
			k.landed(o.out.off, o.landed)
		}
	}
}

// dataAhead takes the arrival of data for post (its low postBits bits) that this task
// has not started: kept when it answers an RTR sent ahead, dropped otherwise (the
// data of an aborted post, polled late).
func (k *task) dataAhead(from int, post uint32, tag int, partial bool) {
	if tag >= len(k.recvByTag) || k.recvByTag[tag] < 0 {
		return
	}
	o := &k.ops[k.recvByTag[tag]]
	if o.ahead <= k.post || o.ahead%(1<<postBits) != post || o.peer != from || o.aheadIn {
		return
	}
	if partial {
		// A landing piece of data sent ahead (a staged output's receive): counted,
		// up to the pieces a send of o.n bytes has; more would be malformed, and
		// the post's own pieces are checked as they come.
		if int(o.aheadPieces+1)*pieceOf(o.n) < o.n {
			o.aheadPieces++
		}
		return
	}
	o.aheadIn = true
}

// exposedAhead reports whether receive o's buffer is exposed for a post not started
// yet: its RTR went out ahead and its data has not landed.
func (k *task) exposedAhead(o *op) bool {
	return o.ahead > k.post && !o.aheadIn
}

// dropUnsent notes, at the Close of a failed task, that the ready-to-receives it still
// has queued never leave: the flush drops an aborted task's items, and until then the
// receives they belong to must not count as exposed, nor their scratch be kept for
// writes that cannot come.
func (k *task) dropUnsent() {
	for _, pe := range k.t.linked {
		q := &pe.queue
		for i := 0; i < q.size; i++ {
			if it := &q.items[(q.head+i)%len(q.items)]; it.k == k && it.kind == itemCtl {
				k.unsentRTR(it.op, it.post, it.ahead)
			}
		}
	}
}

// dropAhead takes the RTRs sent ahead that are still queued out of the send queues: the
// task closes, and its scratch goes with it.
func (k *task) dropAhead() {
	for _, pe := range k.t.peers {
		if pe == nil {
			continue
		}
		q := &pe.queue
		for i := 0; i < q.size; i++ {
			if it := &q.items[(q.head+i)%len(q.items)]; it.k == k && it.ahead {
				k.unsentRTR(it.op, it.post, true) // it never leaves: its buffer is exposed to nobody
				it.k = retired
			}
		}
	}
}
