package verbs

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Writes that the owner copies itself (soft0).
//
// A reduction's scratch is read by its owner as soon as a write lands there. When the
// writer's core stores the bytes, the owner then fetches every line from memory (the
// writer streams them there: "Writes that the owner reads") or from the writer's cache.
// A shared-memory transport lets the reader copy instead (CMA): the bytes come into the
// owner's cache as it copies, and its fold reads them from there. soft0 does the same
// for an RDMA write with immediate of pullMin to pullMax bytes into memory registered
// with HintOwnerReads: the requester publishes the write on the responder's receive
// CQ, and whoever polls that CQ next copies it with plain stores and completes the
// receive, as if the NIC had placed it just then. The write is still one work request
// with RC's semantics: the requester's QP moves on only once it completed, its
// completion comes after the data landed, and nothing else changes for either side.
//
// The owner may not poll (it computes, or it is the same goroutine as the writer):
// after pullGrace the requester claims the write and makes it itself, as before. One
// of the two claims it (an atomic state), so the bytes are copied once.

const (
	pullMin = ownerReadsStreamMin
	// pullMax: up to the transport's landing piece (256 KiB). Larger writes are
	// the writer's, so that a long message's pieces are copied by the writer while
	// the owner folds the ones before.
	pullMax = 256 << 10
	// pullGrace is how long a requester waits for the owner's poll before making
	// the write itself.
	pullGrace = 50 * time.Microsecond
	// pullSpins: the requester yields this many times before it sleeps on the
	// owner's word, which it usually has by then when the owner is polling.
	pullSpins = 32
)

const (
	pullPending int32 = iota + 1
	pullClaimed
	pullDone
)

// softPull is one QP's write in flight to its owner; a QP has at most one, since its
// send queue waits for it.
type softPull struct {
	q, r     *softQP
	dst, src []span
	total    uint64
	imm      uint32
	state    atomic.Int32
	status   WCStatus      // written by the claimer before state becomes pullDone
	done     chan struct{} // the owner's word that it made the write (capacity 1)
	listed   bool          // on r.rcq's list of pulls; guarded by that CQ's mu
	timer    *time.Timer
}

// pullable says whether a write with immediate of total bytes from src into m is
// one that the owner copies.
func pullable(m *softMR, src []span, total uint64) bool {
	if !m.ownerReads || m.gpu || total < pullMin || total > pullMax {
		return false
	}
	for _, s := range src {
		if s.gpu() {
			return false
		}
	}
	return true
}

// pullWrite makes the write with immediate of src into dst (the responder r's
// memory, which it reads) by way of r's poller, or itself after pullGrace. It
// returns the requester's completion and releases dst's reference.
func (q *softQP) pullWrite(r *softQP, dst, src []span, total uint64, imm uint32, wc WC) (WC, bool) {
	j := &q.pull
	if j.done == nil {
		j.done = make(chan struct{}, 1)
		j.q = q
	}
	j.r, j.dst, j.src, j.total, j.imm = r, dst, src, total, imm
	j.state.Store(pullPending)
	r.rcq.addPull(j)
	q.awaitPull(j)
	dst[0].m.users.Add(-1)
	wc.Status = j.status
	return wc, false
}

// awaitPull returns once j is done, by the owner or, after pullGrace, by this
// requester. While it spins it makes the writes published to this QP's own CQs:
// two ranks that write to each other at once (an allreduce's exchange) each wait in
// their post, and neither would poll.
func (q *softQP) awaitPull(j *softPull) {
	for i := 0; i < pullSpins && j.state.Load() == pullPending; i++ {
		q.rcq.runPulls()
		if q.scq != q.rcq {
			q.scq.runPulls()
		}
		runtime.Gosched()
	}
	if j.state.Load() == pullPending {
		if j.timer == nil {
			j.timer = time.NewTimer(pullGrace)
		} else {
			j.timer.Reset(pullGrace)
		}
		select {
		case <-j.done:
			j.timer.Stop()
			return
		case <-j.timer.C:
		}
	}
	if j.run(false) {
		return
	}
	<-j.done // the owner claimed it: its word comes once the write is made
}

// run makes the write if it is still pending: owner says whether the responder's
// poller does it (plain stores, counted as pulled) or the requester (as any write).
// It reports whether this call made it.
func (j *softPull) run(owner bool) bool {
	if !j.state.CompareAndSwap(pullPending, pullClaimed) {
		return false
	}
	q, r := j.q, j.r
	j.status = WCSuccess
	if err := scatter(j.dst, j.src, owner); err != nil {
		j.status = WCGeneralErr
	} else if id, _, ok := q.takeRecv(r); !ok {
		j.status = WCRetryExcErr
	} else {
		r.completeRecv(WC{ID: id, Op: WCRecvRDMAWithImm, Bytes: uint32(j.total), Imm: j.imm, HasImm: true, QPN: r.num})
		if owner {
			j.dst[0].m.pulled.Add(int64(j.total))
		}
	}
	j.state.Store(pullDone)
	if owner {
		j.done <- struct{}{}
	}
	return true
}

// addPull publishes j to this CQ's pollers and wakes one that waits.
func (c *softCQ) addPull(j *softPull) {
	c.mu.Lock()
	if !j.listed {
		j.listed = true
		c.pulls = append(c.pulls, j)
		c.npulls.Store(int32(len(c.pulls)))
	}
	c.wakeups = c.waiting
	c.mu.Unlock()
	c.signal()
}

// runPulls makes the writes published to this CQ, one at a time outside its lock
// (a write completes its receive on this CQ). A write its requester claimed in
// the meantime is skipped.
func (c *softCQ) runPulls() {
	for c.npulls.Load() > 0 {
		c.mu.Lock()
		if len(c.pulls) == 0 {
			c.mu.Unlock()
			return
		}
		j := c.pulls[0]
		n := copy(c.pulls, c.pulls[1:])
		c.pulls[n] = nil
		c.pulls = c.pulls[:n]
		c.npulls.Store(int32(n))
		j.listed = false
		c.mu.Unlock()
		j.run(true)
	}
}
