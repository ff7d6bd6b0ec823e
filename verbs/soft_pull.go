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
// The owner may not poll (it computes, folds an earlier piece, or is the same
// goroutine as the writer): after pullWait the requester claims the write and makes
// it itself, as before. One of the two claims it (an atomic state), so the bytes are
// copied once. Only a write posted on its own (not a message's landing pieces, which
// the transport posts at once: the owner folds each while the writer writes the next)
// and the last request queued on its QP is offered.

const (
	pullMin = ownerReadsStreamMin
	// pullMax: up to the transport's landing piece (256 KiB); a larger write is a
	// piece of a message too long for the owner to copy alone.
	pullMax = 256 << 10
)

// pullWait is how long the requester offers the write to the owner before it makes
// it itself. The owner that waits for the data takes it within a poll; one that is
// busy (folding an earlier piece) would make the writer wait where it could write.
// 2-rank persistent reduce, p50 µs over four alternated rounds, with 3, 10 and 30
// µs: 64 KiB 8.0, 7.5, 8.1; 256 KiB 22.8, 21.1, 23.7 (docs/design.md). A variable
// only for tests (export_test.go).
var pullWait atomic.Int64

func init() { pullWait.Store(int64(10 * time.Microsecond)) }

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

// lastQueued says whether the request that this QP executes is the only one queued:
// the writer has nothing else to do while it waits for the owner.
func (q *softQP) lastQueued() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sqN == 1
}

// pullWrite makes the write with immediate of src into dst (the responder r's
// memory, which it reads) by way of r's poller, or itself after pullWait. It
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

// awaitPull returns once j is done, by the owner or by this requester: the owner
// has until pullWait to claim it. While it waits the requester makes the writes
// published to its own QP's CQs: two ranks that write to each other at once (an
// allreduce's exchange) each wait in their post, and neither would poll.
func (q *softQP) awaitPull(j *softPull) {
	end := time.Now().Add(time.Duration(pullWait.Load()))
	for j.state.Load() == pullPending && time.Now().Before(end) {
		q.rcq.runPulls()
		if q.scq != q.rcq {
			q.scq.runPulls()
		}
		runtime.Gosched()
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
