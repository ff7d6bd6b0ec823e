package verbs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ibcoll/ibcoll/internal/hostcopy"
	"github.com/ibcoll/ibcoll/mem"

	"golang.org/x/sys/unix"
)

// softRetryWindow is how long a requester waits for a responder that is
// not ready (not yet connected), like a real RC QP's transport retries
// (timeout 14 × retry_cnt 7 ≈ 0.5 s) before RETRY_EXC_ERR.
const softRetryWindow = 500 * time.Millisecond

type softSend struct {
	wr     SendWR
	sges   []SGE
	inline []byte
	alone  bool // posted by a PostSend of one request (soft_pull.go)
}

type softRecv struct {
	id   uint64
	sges []SGE
}

type span struct {
	m *softMR // nil for inline data
	p unsafe.Pointer
	n uint64
}

func (s span) gpu() bool { return s.m != nil && s.m.gpu }

// memType is how the copy engine must see the span's memory.
func (s span) memType() mem.Type {
	if s.gpu() {
		return mem.CUDA
	}
	return mem.Host
}

// softQP is an RC queue pair. Its worker goroutine is the only one that
// takes work off the send queue and the only one that flushes, so the
// completions of a QP are in order.
type softQP struct {
	ctx *softCtx
	pd  *softPD
	dev *softDevice
	num uint32
	psn uint32
	scq *softCQ
	rcq *softCQ

	mu     sync.Mutex
	cond   sync.Cond
	st     QPState
	busy   bool // a goroutine (worker or poster) is executing the head
	remote *softQP
	sq     []softSend
	sqHead int
	sqN    int
	rq     []softRecv
	rqHead int
	rqN    int
	// rxTaken counts receives a peer's worker took and has not completed
	// yet; a flush waits for them, so receive completions stay in order.
	rxTaken int

	// Read without q.mu by the peer's worker, which holds the peer's lock.
	failed    atomic.Bool
	closed    atomic.Bool
	connected atomic.Bool

	done    chan struct{}
	pull    softPull // a write its owner copies (soft_pull.go)
	local   []span   // worker scratch
	remote2 []span
	rsges   []SGE
}

func (p *softPD) createQP(cfg QPConfig, send, recv cqBackend) (qpBackend, error) {
	if err := p.ctx.fault(FaultCreateQP, "CreateQP"); err != nil {
		return nil, err
	}
	q := &softQP{
		ctx: p.ctx, pd: p, dev: p.ctx.dev, scq: send.(*softCQ), rcq: recv.(*softCQ),
		st: QPStateInit, sq: make([]softSend, cfg.MaxSendWR), rq: make([]softRecv, max(cfg.MaxRecvWR, 1)),
		done: make(chan struct{}), local: make([]span, 0, cfg.MaxSGE), remote2: make([]span, 0, cfg.MaxSGE),
	}
	q.cond.L = &q.mu
	for i := range q.sq {
		q.sq[i].sges = make([]SGE, 0, cfg.MaxSGE)
		if cfg.MaxInline > 0 {
			q.sq[i].inline = make([]byte, 0, cfg.MaxInline)
		}
	}
	for i := range q.rq {
		q.rq[i].sges = make([]SGE, 0, cfg.MaxSGE)
	}
	q.psn = uint32(time.Now().UnixNano()) & 0xffffff
	d := p.ctx.dev
	d.mu.Lock()
	d.nextQPN++
	q.num = d.nextQPN
	d.qps[q.num] = q
	d.mu.Unlock()
	go q.run()
	return q, nil
}

func (q *softQP) qpn() uint32 { return q.num }

func (q *softQP) info() QPInfo {
	i := QPInfo{LID: q.ctx.lid, GID: q.dev.gid, QPN: q.num, PSN: q.psn, Port: 1, MTU: 4096, DeviceGUID: q.dev.guid}
	if q.ctx.ll == LinkLayerInfiniBand {
		i.GID = GID{} // no GRH on an InfiniBand subnet: the LID is the address
	}
	return i
}

func (q *softQP) connect(remote QPInfo) error {
	if remote.DeviceGUID != q.dev.guid {
		return invalid("Connect", "remote QP %#x is not on this process's soft0 (guid %#x): soft0 is in-process only", remote.QPN, remote.DeviceGUID)
	}
	q.dev.mu.RLock()
	r := q.dev.qps[remote.QPN]
	q.dev.mu.RUnlock()
	if r == nil {
		return invalid("Connect", "no soft0 QP %#x", remote.QPN)
	}
	// Address the peer as the link layer does, with the checks ibv makes.
	switch q.ctx.ll {
	case LinkLayerInfiniBand:
		if remote.LID == 0 {
			return invalid("Connect", "remote LID is 0: InfiniBand addresses peers by LID")
		}
		if r.ctx.lid != remote.LID {
			return invalid("Connect", "no soft0 QP %#x at LID %d (it is at LID %d)", remote.QPN, remote.LID, r.ctx.lid)
		}
	case LinkLayerEthernet:
		if remote.GID.IsZero() {
			return invalid("Connect", "remote GID is zero: RoCE addresses peers by GID")
		}
		if remote.GID != q.dev.gid {
			return invalid("Connect", "remote GID %v is not soft0's", remote.GID)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.st != QPStateInit {
		return errnoError("Connect", unix.EINVAL, fmt.Sprintf("QP %#x is in state %v, not INIT", q.num, q.st))
	}
	if err := connectFault("Connect"); err != nil {
		return err // soft0's Connect is one step: the QP stays in INIT
	}
	q.remote = r
	q.st = QPStateRTS
	q.connected.Store(true)
	return nil
}

func (q *softQP) path() (Path, error) { return q.ctx.path, nil }

func (q *softQP) state() (QPState, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.st, nil
}

func (q *softQP) toError() error {
	q.mu.Lock()
	q.st = QPStateError
	q.failed.Store(true)
	q.cond.Broadcast()
	r := q.remote
	q.mu.Unlock()
	r.wake()
	return nil
}

// wake wakes whoever waits on q's queues: its own worker, and a peer's
// worker waiting for q to post a receive (RNR). Nil-safe, for unconnected QPs.
func (q *softQP) wake() {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.cond.Broadcast()
	q.mu.Unlock()
}

func (q *softQP) postSend(wrs []SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, full := fit("PostSend", "send", len(q.sq)-q.sqN, len(wrs))
	if q.ctx.postArmed.Load() {
		// Counts the requests the queue took: one refused as the queue is full
		// is never posted, so the fault does not pass over it.
		if i, err := q.ctx.postFault(n); err != nil {
			n, full = i, err
		}
	}
	wrs = wrs[:n]
	for i := range wrs {
		e := &q.sq[(q.sqHead+q.sqN+i)%len(q.sq)]
		e.wr = wrs[i]
		e.wr.SGE = nil
		e.alone = len(wrs) == 1
		e.sges = append(e.sges[:0], wrs[i].SGE...)
		if wrs[i].Inline {
			// Inline data is captured at post time: the caller may
			// reuse the buffer as soon as the post returns.
			e.inline = e.inline[:0]
			for _, s := range wrs[i].SGE {
				e.inline = append(e.inline, unsafe.Slice((*byte)(ptrOf(uintptr(s.Addr))), s.Length)...)
			}
		}
	}
	q.sqN += len(wrs)
	if len(wrs) == 0 || q.busy || q.sqN != len(wrs) || q.st != QPStateRTS || q.ctx.delay.Load() > 0 || postBytes(wrs) > softInlineExecMax {
		q.cond.Broadcast()
		return full
	}
	q.busy = true
	q.mu.Unlock()
	q.drain(false)
	q.mu.Lock()
	return full
}

// softInlineExecMax is the largest post the poster executes itself. Bigger
// copies go to the QP's worker, so that a rank writing to many peers (a
// scatter root) spreads its copies over the cores instead of doing them one
// after another; below it, the hand-off would cost more than the copy.
const softInlineExecMax = 1 << 20

// fit says how many of n requests a queue with room free slots takes. Like
// a real provider, soft posts the requests that fit and refuses the first
// that does not; the ones before it will complete.
func fit(op, queue string, room, n int) (int, error) {
	if n <= room {
		return n, nil
	}
	e := errnoError(op, unix.ENOMEM, fmt.Sprintf("%s queue full: wrs[%d] of %d refused; wrs[:%d] were posted", queue, room, n, room)).(*Error)
	e.Posted = room
	return room, e
}

func postBytes(wrs []SendWR) int {
	n := 0
	for i := range wrs {
		for _, s := range wrs[i].SGE {
			n += int(s.Length)
		}
	}
	return n
}

func (q *softQP) postRecv(wrs []RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, full := fit("PostRecv", "receive", len(q.rq)-q.rqN, len(wrs))
	wrs = wrs[:n]
	for i := range wrs {
		e := &q.rq[(q.rqHead+q.rqN+i)%len(q.rq)]
		e.id = wrs[i].ID
		e.sges = append(e.sges[:0], wrs[i].SGE...)
	}
	q.rqN += len(wrs)
	q.cond.Broadcast()
	return full
}

func (q *softQP) close() error {
	q.mu.Lock()
	q.closed.Store(true)
	q.cond.Broadcast()
	r := q.remote
	q.mu.Unlock()
	r.wake()
	<-q.done
	q.dev.mu.Lock()
	delete(q.dev.qps, q.num)
	q.dev.mu.Unlock()
	return nil
}

func (q *softQP) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		for (q.sqN == 0 || q.busy) && !q.closed.Load() && !(q.st == QPStateError && q.rqN > 0 && !q.busy) {
			q.cond.Wait()
		}
		if q.closed.Load() {
			q.mu.Unlock()
			return
		}
		if q.st == QPStateError {
			if q.rxTaken > 0 && q.rqN > 0 {
				q.cond.Wait()
				q.mu.Unlock()
				continue
			}
			q.flushLocked()
			q.mu.Unlock()
			continue
		}
		q.busy = true
		q.mu.Unlock()
		q.drain(true)
	}
}

// drain executes queued requests in order while q.busy is held. With
// mayBlock false (the posting goroutine) it stops at a request that would
// have to wait for the responder and leaves it to the worker: executing
// on the poster saves a goroutine hand-off per request, which on a few
// oversubscribed cores costs more than the copy itself.
func (q *softQP) drain(mayBlock bool) {
	for {
		q.mu.Lock()
		if q.sqN == 0 || q.st == QPStateError || q.closed.Load() {
			q.busy = false
			q.cond.Broadcast()
			q.mu.Unlock()
			return
		}
		e := &q.sq[q.sqHead]
		q.mu.Unlock()

		wc, blocked := q.execute(e, mayBlock)
		if blocked {
			q.mu.Lock()
			q.busy = false
			q.cond.Broadcast()
			q.mu.Unlock()
			return
		}
		if d := q.ctx.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		// The slot is free for new posts once it is released: read what
		// is still needed from it first.
		signaled := e.wr.Signaled
		q.mu.Lock()
		q.sqHead = (q.sqHead + 1) % len(q.sq)
		q.sqN--
		q.mu.Unlock()
		if wc.Status != WCSuccess || signaled {
			q.scq.push(wc)
		}
		if wc.Status != WCSuccess {
			_ = q.toError()
		}
	}
}

// flushLocked completes all queued work with WR_FLUSH_ERR, as a QP in the
// error state does.
func (q *softQP) flushLocked() {
	for ; q.sqN > 0; q.sqN-- {
		e := &q.sq[q.sqHead]
		q.scq.push(WC{ID: e.wr.ID, Status: WCWRFlushErr, Op: wcOpFor(e.wr.Op), QPN: q.num})
		q.sqHead = (q.sqHead + 1) % len(q.sq)
	}
	for ; q.rqN > 0; q.rqN-- {
		q.rcq.push(WC{ID: q.rq[q.rqHead].id, Status: WCWRFlushErr, Op: WCRecv, QPN: q.num})
		q.rqHead = (q.rqHead + 1) % len(q.rq)
	}
}

// resolve maps an SGE list to memory, taking a user reference on each MR.
func (q *softQP) resolve(out []span, pd *softPD, sges []SGE, need Access) ([]span, bool) {
	out = out[:0]
	for _, s := range sges {
		m, p, ok := q.dev.use(s.LKey, pd, s.Addr, uint64(s.Length), need)
		if !ok {
			release(out)
			return out[:0], false
		}
		out = append(out, span{m, p, uint64(s.Length)})
	}
	return out, true
}

func release(spans []span) {
	for _, s := range spans {
		s.m.users.Add(-1)
	}
}

func spanLen(spans []span) uint64 {
	var n uint64
	for _, s := range spans {
		n += s.n
	}
	return n
}

// scatter copies the bytes of src spans into dst spans in order. Device memory of the
// GPUDirect stand-in moves through the CUDA copy engine; a failure of that copy is
// the only error. plain keeps every host copy in the copying core's cache (the
// owner copies: soft_pull.go), where dst's memory would otherwise choose.
func scatter(dst, src []span, plain bool) error {
	di, doff := 0, uint64(0)
	for _, s := range src {
		soff := uint64(0)
		for soff < s.n {
			d := dst[di]
			n := min(s.n-soff, d.n-doff)
			if d.gpu() || s.gpu() {
				if err := mem.CopyPtr(uintptr(unsafe.Add(d.p, doff)), d.memType(), uintptr(unsafe.Add(s.p, soff)), s.memType(), int(n)); err != nil {
					return err
				}
			} else {
				to, from := unsafe.Slice((*byte)(unsafe.Add(d.p, doff)), n), unsafe.Slice((*byte)(unsafe.Add(s.p, soff)), n)
				if !plain && d.m != nil && d.m.streams(n) {
					hostcopy.Stream(to, from)
					d.m.streamed.Add(int64(n))
				} else {
					hostcopy.Copy(to, from)
				}
			}
			soff += n
			doff += n
			if doff == d.n {
				di++
				doff = 0
			}
		}
	}
	return nil
}

// responder waits until the peer can take requests. It returns nil when
// the peer is gone, failed, or never became ready within the retry window.
func (q *softQP) responder() *softQP {
	r := q.remote
	deadline := time.Time{}
	for !r.connected.Load() {
		if r.closed.Load() || r.failed.Load() || q.closed.Load() || q.failed.Load() {
			return nil
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(softRetryWindow)
		} else if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	// A responder connected to another QP drops our packets, as on a
	// real fabric: the requester runs out of retries.
	if r.closed.Load() || r.failed.Load() || r.remote != q {
		return nil
	}
	return r
}

// completeRecv posts the completion of a receive that takeRecv took.
func (r *softQP) completeRecv(wc WC) {
	r.rcq.push(wc)
	r.mu.Lock()
	r.rxTaken--
	r.cond.Broadcast()
	r.mu.Unlock()
}

// awaitRecv waits until the responder has a receive posted, as an RC QP
// with infinite RNR retry does, without taking it: only this QP takes
// r's receives, so one is there when takeRecv comes. ok is false when
// either side fails.
func (q *softQP) awaitRecv(r *softQP) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.rqN == 0 {
		if r.closed.Load() || r.failed.Load() || q.closed.Load() || q.failed.Load() {
			return false
		}
		r.cond.Wait()
	}
	return true
}

// takeRecv consumes the responder's next receive, waiting for one as an
// RC QP with infinite RNR retry does. ok is false when either side fails.
func (q *softQP) takeRecv(r *softQP) (id uint64, sges []SGE, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.rqN == 0 {
		if r.closed.Load() || r.failed.Load() || q.closed.Load() || q.failed.Load() {
			return 0, nil, false
		}
		r.cond.Wait()
	}
	if r.closed.Load() || r.failed.Load() {
		return 0, nil, false
	}
	e := &r.rq[r.rqHead]
	// The slot is free for new posts once r.mu is released, so the SGE
	// list is copied into worker scratch first.
	q.rsges = append(q.rsges[:0], e.sges...)
	r.rqHead = (r.rqHead + 1) % len(r.rq)
	r.rqN--
	r.rxTaken++
	return e.id, q.rsges, true
}

func (q *softQP) execute(e *softSend, mayBlock bool) (WC, bool) {
	wr := &e.wr
	wc := WC{ID: wr.ID, Op: wcOpFor(wr.Op), QPN: q.num}
	fail := func(s WCStatus) (WC, bool) { wc.Status = s; return wc, false }

	// Wait for the responder first, holding no references on local
	// memory: an MR.Close must not wait for a peer that never posts.
	if !mayBlock && q.mustWait(wr.Op) {
		return wc, true
	}
	r := q.responder()
	if r == nil {
		return fail(WCRetryExcErr)
	}
	if consumesRecv(wr.Op) && !q.awaitRecv(r) {
		return fail(WCRetryExcErr)
	}
	remoteFail := func(s WCStatus) (WC, bool) {
		_ = r.toError()
		return fail(s)
	}

	var local []span
	if wr.Inline && (wr.Op == OpSend || wr.Op == OpSendWithImm || wr.Op == OpRDMAWrite || wr.Op == OpRDMAWriteWithImm) {
		if len(e.inline) > 0 {
			local = append(q.local[:0], span{p: unsafe.Pointer(&e.inline[0]), n: uint64(len(e.inline))})
		}
	} else {
		need := Access(0)
		if wr.Op == OpRDMARead || wr.Op.isAtomic() {
			need = AccessLocalWrite
		}
		var ok bool
		if local, ok = q.resolve(q.local, q.pd, e.sges, need); !ok {
			return fail(WCLocProtErr)
		}
		defer release(local)
	}
	total := spanLen(local)

	switch wr.Op {
	case OpRDMAWrite, OpRDMAWriteWithImm, OpRDMARead:
		need := AccessRemoteWrite
		if wr.Op == OpRDMARead {
			need = AccessRemoteRead
		}
		m, p, ok := r.dev.use(wr.RKey, r.pd, wr.RemoteAddr, total, need)
		if !ok {
			return remoteFail(WCRemAccessErr)
		}
		rs := append(q.remote2[:0], span{m, p, total})
		if wr.Op == OpRDMAWriteWithImm && e.alone && pullable(m, local, total) && q.lastQueued() {
			return q.pullWrite(r, rs, local, total, wr.Imm, wc)
		}
		var err error
		if wr.Op == OpRDMARead {
			err = scatter(local, rs, false)
		} else {
			err = scatter(rs, local, false)
		}
		m.users.Add(-1)
		if err != nil {
			return fail(WCGeneralErr)
		}
		if wr.Op == OpRDMARead {
			wc.Bytes = uint32(total)
		}
		if wr.Op != OpRDMAWriteWithImm {
			return wc, false
		}
		id, _, ok := q.takeRecv(r)
		if !ok {
			return fail(WCRetryExcErr)
		}
		r.completeRecv(WC{ID: id, Op: WCRecvRDMAWithImm, Bytes: uint32(total), Imm: wr.Imm, HasImm: true, QPN: r.num})
		return wc, false
	case OpSend, OpSendWithImm:
		id, sges, ok := q.takeRecv(r)
		if !ok {
			return fail(WCRetryExcErr)
		}
		dst, ok := r.resolve(q.remote2, r.pd, sges, AccessLocalWrite)
		if !ok {
			r.completeRecv(WC{ID: id, Status: WCLocProtErr, Op: WCRecv, QPN: r.num})
			return remoteFail(WCRemOpErr)
		}
		if spanLen(dst) < total {
			release(dst)
			r.completeRecv(WC{ID: id, Status: WCLocLenErr, Op: WCRecv, QPN: r.num})
			return remoteFail(WCRemInvReqErr)
		}
		err := scatter(dst, local, false)
		release(dst)
		if err != nil {
			r.completeRecv(WC{ID: id, Status: WCGeneralErr, Op: WCRecv, QPN: r.num})
			return fail(WCGeneralErr)
		}
		rwc := WC{ID: id, Op: WCRecv, Bytes: uint32(total), QPN: r.num}
		if wr.Op == OpSendWithImm {
			rwc.Imm, rwc.HasImm = wr.Imm, true
		}
		r.completeRecv(rwc)
		return wc, false
	case OpAtomicFetchAdd, OpAtomicCmpSwap:
		if r.pd.ctx.noAtomics {
			// A QP of a device without atomics has no remote atomic access.
			return remoteFail(WCRemAccessErr)
		}
		m, p, ok := r.dev.use(wr.RKey, r.pd, wr.RemoteAddr, 8, AccessRemoteAtomic)
		if ok && m.gpu {
			// The stand-in copies; it has no atomic access to device memory.
			m.users.Add(-1)
			ok = false
		}
		if !ok {
			return remoteFail(WCRemAccessErr)
		}
		word := (*uint64)(p)
		var old uint64
		if wr.Op == OpAtomicFetchAdd {
			old = atomic.AddUint64(word, wr.CompareAdd) - wr.CompareAdd
		} else {
			for {
				old = atomic.LoadUint64(word)
				if old != wr.CompareAdd || atomic.CompareAndSwapUint64(word, old, wr.Swap) {
					break
				}
			}
		}
		m.users.Add(-1)
		// The result goes where the local SGE says, which the GPUDirect stand-in may
		// have registered in device memory: scatter copies it there with the copy
		// engine (a CPU store to a device address faults).
		if err := scatter(local, []span{{p: unsafe.Pointer(&old), n: 8}}, true); err != nil {
			return fail(WCLocProtErr)
		}
		wc.Bytes = 8
		return wc, false
	}
	return fail(WCLocQPOpErr)
}

func consumesRecv(op Opcode) bool {
	return op == OpSend || op == OpSendWithImm || op == OpRDMAWriteWithImm
}

// mustWait reports whether op would have to wait for the responder: it is
// not connected yet, or op consumes a receive and none is posted.
func (q *softQP) mustWait(op Opcode) bool {
	r := q.remote
	if !r.connected.Load() {
		return true
	}
	if !consumesRecv(op) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rqN == 0 && !r.closed.Load() && !r.failed.Load()
}
