//go:build cgo

package verbs

/*
#cgo CFLAGS: -I${SRCDIR}/../cgo
#cgo LDFLAGS: -libverbs
#include <stdlib.h>
#include "verbs_shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"golang.org/x/sys/unix"
)

// Connection parameters. They are the values perftest and the rdma-core
// examples use: enough retries to ride out a busy receiver, short enough
// that a dead peer is reported in seconds (timeout 14 is 4.096 µs × 2^14 ≈
// 67 ms per try).
const (
	qpMinRNRTimer = 12 // 0.64 ms
	qpTimeout     = 14
	qpRetryCnt    = 7
	qpRNRRetry    = 7 // infinite: a receiver that has not posted yet is not an error
	qpHopLimit    = 64
	qpMaxRdAtomic = 16 // outstanding RDMA reads/atomics, capped by the device

	// qpPreallocWR caps the work requests whose C descriptors are allocated
	// with a QP; a longer post grows them once.
	qpPreallocWR = 1024
)

// ibvQP is an RC queue pair. What a peer needs to connect is fixed at
// creation; posting builds chains in C memory owned by the QP.
type ibvQP struct {
	c   *ibvContext
	qp  *C.struct_ibv_qp
	me  QPInfo
	ll  LinkLayer
	mtu int // enum ibv_mtu of the port's active MTU

	maxRdAtomic     int // as initiator
	maxDestRdAtomic int // as target

	sendMu sync.Mutex
	send   postBuf[C.struct_ibcoll_send_desc, C.struct_ibv_send_wr]
	recvMu sync.Mutex
	recv   postBuf[C.struct_ibcoll_recv_desc, C.struct_ibv_recv_wr]
}

// postBuf is the C memory one post needs: flat descriptors, the SGEs they
// point to, the verbs work requests the shim links, and the index of the
// request that failed. Every slice points at C memory.
type postBuf[D, W any] struct {
	descs []D
	sges  []C.struct_ibv_sge
	wrs   []W
	bad   []C.int
}

// reserve makes room for nwr requests carrying nsge SGEs in all. It
// allocates only when a post is larger than any before it.
func (b *postBuf[D, W]) reserve(nwr, nsge int) error {
	if b.bad == nil {
		bad, ok := cAlloc[C.int](1)
		if !ok {
			return unix.ENOMEM
		}
		b.bad = bad
	}
	if nwr > len(b.descs) {
		descs, ok1 := cAlloc[D](nwr)
		wrs, ok2 := cAlloc[W](nwr)
		if !ok1 || !ok2 {
			cFree(descs)
			cFree(wrs)
			return unix.ENOMEM
		}
		cFree(b.descs)
		cFree(b.wrs)
		b.descs, b.wrs = descs, wrs
	}
	if nsge > len(b.sges) {
		sges, ok := cAlloc[C.struct_ibv_sge](nsge)
		if !ok {
			return unix.ENOMEM
		}
		cFree(b.sges)
		b.sges = sges
	}
	return nil
}

func (b *postBuf[D, W]) free() {
	cFree(b.descs)
	cFree(b.sges)
	cFree(b.wrs)
	cFree(b.bad)
	*b = postBuf[D, W]{}
}

// createQP wraps ibv_create_qp(3) and moves the QP to INIT on the
// context's port, with every remote access allowed: MRs carry the access
// rules, so the QP need not repeat them.
func (p *ibvPD) createQP(cfg QPConfig, send, recv cqBackend) (qpBackend, error) {
	const op = "CreateQP"
	scq, ok1 := send.(*ibvCQ)
	rcq, ok2 := recv.(*ibvCQ)
	if !ok1 || !ok2 {
		return nil, invalid(op, "CQ of another provider")
	}
	c := p.c
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq = scq.cq
	ia.recv_cq = rcq.cq
	ia.qp_type = C.IBV_QPT_RC
	ia.sq_sig_all = 0
	ia.cap.max_send_wr = C.uint32_t(cfg.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(cfg.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(cfg.MaxSGE)
	ia.cap.max_recv_sge = C.uint32_t(cfg.MaxSGE)
	ia.cap.max_inline_data = C.uint32_t(cfg.MaxInline)
	qp, err := C.ibv_create_qp(p.pd, &ia)
	if qp == nil {
		return nil, errnoError(op, errnoOf(err, unix.ENOMEM), fmt.Sprintf("ibv_create_qp (send %d, recv %d, sge %d, inline %d)",
			cfg.MaxSendWR, cfg.MaxRecvWR, cfg.MaxSGE, cfg.MaxInline))
	}
	q := &ibvQP{
		c:               c,
		qp:              qp,
		maxRdAtomic:     min(qpMaxRdAtomic, c.maxInitRdAtom),
		maxDestRdAtomic: min(qpMaxRdAtomic, c.attr.MaxQPRdAtom),
	}
	if err := q.init(cfg); err != nil {
		q.send.free()
		q.recv.free()
		C.ibv_destroy_qp(qp)
		return nil, err
	}
	return q, nil
}

func (q *ibvQP) init(cfg QPConfig) error {
	const op = "CreateQP"
	c := q.c
	var pa C.struct_ibv_port_attr
	if rc := C.ibcoll_query_port(c.ctx, C.uint8_t(c.port), &pa); rc != 0 {
		return errnoError(op, unix.Errno(rc), fmt.Sprintf("ibv_query_port %s port %d", c.name, c.port))
	}
	q.ll = LinkLayer(pa.link_layer)
	q.mtu = int(pa.active_mtu)
	var gid C.union_ibv_gid
	if rc, err := C.ibv_query_gid(c.ctx, C.uint8_t(c.port), C.int(c.gidIndex), &gid); rc != 0 && q.ll == LinkLayerEthernet {
		return errnoError(op, rcErrno(rc, err), fmt.Sprintf("ibv_query_gid %s port %d index %d", c.name, c.port, c.gidIndex))
	}
	q.me = QPInfo{
		LID:        uint16(pa.lid),
		GID:        GID(gid),
		QPN:        uint32(q.qp.qp_num),
		PSN:        rand.Uint32() & 0xffffff,
		Port:       uint8(c.port),
		GIDIndex:   uint8(c.gidIndex),
		MTU:        uint16(mtuBytes(q.mtu)),
		DeviceGUID: c.attr.NodeGUID,
	}
	if q.ll == LinkLayerEthernet && q.me.GID.IsZero() {
		return newError(op, ErrNoDevice, fmt.Sprintf("%s port %d has no GID at index %d (RoCE needs one; choose another with Options.GIDIndex)", c.name, c.port, c.gidIndex))
	}

	nwr := min(cfg.MaxSendWR, qpPreallocWR)
	if err := q.send.reserve(nwr, nwr*cfg.MaxSGE); err != nil {
		return errnoError(op, unix.ENOMEM, "send work-request buffers")
	}
	nwr = min(max(cfg.MaxRecvWR, 1), qpPreallocWR)
	if err := q.recv.reserve(nwr, nwr*cfg.MaxSGE); err != nil {
		return errnoError(op, unix.ENOMEM, "receive work-request buffers")
	}

	return q.toInit(op)
}

// toInit moves the QP from RESET to INIT: at creation, and again after a Connect that
// failed past RTR (connect).
func (q *ibvQP) toInit(op string) error {
	c := q.c
	var a C.struct_ibv_qp_attr
	a.qp_state = C.IBV_QPS_INIT
	a.pkey_index = C.uint16_t(c.pkeyIndex)
	a.port_num = C.uint8_t(c.port)
	a.qp_access_flags = C.IBV_ACCESS_LOCAL_WRITE | C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_REMOTE_READ
	if c.attr.AtomicCap {
		// Only where the device does atomics: mlx5_ib fails the move to RTR
		// (EOPNOTSUPP) when remote atomics are asked of a function without them
		// (get_atomic_mode), so every Connect would fail there.
		a.qp_access_flags |= C.IBV_ACCESS_REMOTE_ATOMIC
	}
	return q.modify(op, "INIT", &a, C.IBV_QP_STATE|C.IBV_QP_PKEY_INDEX|C.IBV_QP_PORT|C.IBV_QP_ACCESS_FLAGS)
}

func (q *ibvQP) modify(op, to string, a *C.struct_ibv_qp_attr, mask C.int) error {
	if rc, err := C.ibv_modify_qp(q.qp, a, mask); rc != 0 {
		return errnoError(op, rcErrno(rc, err), fmt.Sprintf("ibv_modify_qp QP %#x to %s", q.me.QPN, to))
	}
	return nil
}

func (q *ibvQP) qpn() uint32  { return q.me.QPN }
func (q *ibvQP) info() QPInfo { return q.me }

// connect moves the QP to RTR towards remote, then to RTS. On InfiniBand
// the peer is addressed by LID; on RoCE by a GRH from the local GID index
// chosen at open to the peer's GID. The path MTU is the smaller of the two
// active MTUs: a larger one than the peer's port carries is dropped.
func (q *ibvQP) connect(remote QPInfo) error {
	const op = "Connect"
	if q.ll == LinkLayerEthernet && remote.GID.IsZero() {
		return invalid(op, "remote GID is zero: RoCE addresses peers by GID")
	}
	if q.ll != LinkLayerEthernet && remote.LID == 0 {
		return invalid(op, "remote LID is 0: InfiniBand addresses peers by LID")
	}
	mtu := q.mtu
	if remote.MTU != 0 {
		mtu = min(mtu, max(mtuEnum(int(remote.MTU)), 1))
	}

	var a C.struct_ibv_qp_attr
	a.qp_state = C.IBV_QPS_RTR
	a.path_mtu = C.enum_ibv_mtu(mtu)
	a.dest_qp_num = C.uint32_t(remote.QPN)
	a.rq_psn = C.uint32_t(remote.PSN & 0xffffff)
	a.max_dest_rd_atomic = C.uint8_t(q.maxDestRdAtomic)
	a.min_rnr_timer = qpMinRNRTimer
	a.ah_attr.port_num = C.uint8_t(q.me.Port)
	a.ah_attr.sl = C.uint8_t(q.c.serviceLevel)
	if q.ll == LinkLayerEthernet {
		a.ah_attr.is_global = 1
		a.ah_attr.grh.dgid = C.union_ibv_gid(remote.GID)
		a.ah_attr.grh.sgid_index = C.uint8_t(q.me.GIDIndex)
		a.ah_attr.grh.hop_limit = qpHopLimit
		a.ah_attr.grh.traffic_class = C.uint8_t(q.c.trafficClass)
	} else {
		a.ah_attr.dlid = C.uint16_t(remote.LID)
	}
	err := q.modify(op, "RTR", &a, C.IBV_QP_STATE|C.IBV_QP_AV|C.IBV_QP_PATH_MTU|C.IBV_QP_DEST_QPN|
		C.IBV_QP_RQ_PSN|C.IBV_QP_MAX_DEST_RD_ATOMIC|C.IBV_QP_MIN_RNR_TIMER)
	if err != nil {
		return err
	}

	a = C.struct_ibv_qp_attr{}
	a.qp_state = C.IBV_QPS_RTS
	a.timeout = qpTimeout
	a.retry_cnt = qpRetryCnt
	a.rnr_retry = qpRNRRetry
	a.sq_psn = C.uint32_t(q.me.PSN)
	a.max_rd_atomic = C.uint8_t(q.maxRdAtomic)
	err = connectFault(op)
	if err == nil {
		err = q.modify(op, "RTS", &a, C.IBV_QP_STATE|C.IBV_QP_TIMEOUT|C.IBV_QP_RETRY_CNT|C.IBV_QP_RNR_RETRY|
			C.IBV_QP_SQ_PSN|C.IBV_QP_MAX_QP_RD_ATOMIC)
	}
	if err != nil {
		// The QP is in RTR, from which a second Connect's move to RTR is refused:
		// back through RESET to INIT, as created, so that Connect may be retried.
		var r C.struct_ibv_qp_attr
		r.qp_state = C.IBV_QPS_RESET
		if rerr := q.modify(op, "RESET", &r, C.IBV_QP_STATE); rerr != nil {
			return errors.Join(err, rerr)
		}
		return errors.Join(err, q.toInit(op))
	}
	return nil
}

// ibvWROpcode maps Opcode to enum ibv_wr_opcode.
var ibvWROpcode = [...]C.uint32_t{
	OpSend:             C.IBV_WR_SEND,
	OpSendWithImm:      C.IBV_WR_SEND_WITH_IMM,
	OpRDMAWrite:        C.IBV_WR_RDMA_WRITE,
	OpRDMAWriteWithImm: C.IBV_WR_RDMA_WRITE_WITH_IMM,
	OpRDMARead:         C.IBV_WR_RDMA_READ,
	OpAtomicFetchAdd:   C.IBV_WR_ATOMIC_FETCH_AND_ADD,
	OpAtomicCmpSwap:    C.IBV_WR_ATOMIC_CMP_AND_SWP,
}

// postSend wraps ibv_post_send(3): the requests become one chain, one
// doorbell. It allocates nothing once the QP's buffers have grown to the
// largest post.
func (q *ibvQP) postSend(wrs []SendWR) error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	nsge := 0
	for i := range wrs {
		nsge += len(wrs[i].SGE)
	}
	b := &q.send
	if err := b.reserve(len(wrs), nsge); err != nil {
		return errnoError("PostSend", unix.ENOMEM, "work-request buffers")
	}
	k := 0
	for i := range wrs {
		w := &wrs[i]
		var flags C.uint32_t
		if w.Signaled {
			flags |= C.IBV_SEND_SIGNALED
		}
		if w.Inline {
			flags |= C.IBV_SEND_INLINE
		}
		b.descs[i] = C.struct_ibcoll_send_desc{
			wr_id:       C.uint64_t(w.ID),
			remote_addr: C.uint64_t(w.RemoteAddr),
			compare_add: C.uint64_t(w.CompareAdd),
			swap:        C.uint64_t(w.Swap),
			rkey:        C.uint32_t(w.RKey),
			imm:         C.uint32_t(w.Imm),
			num_sge:     C.uint32_t(len(w.SGE)),
			opcode:      ibvWROpcode[w.Op],
			flags:       flags,
		}
		for _, s := range w.SGE {
			b.sges[k] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
			k++
		}
	}
	rc := C.ibcoll_post_send(q.qp, &b.descs[0], C.int(len(wrs)), &b.sges[0], &b.wrs[0], &b.bad[0])
	if rc != 0 {
		return postError("PostSend", "ibv_post_send", unix.Errno(rc), int(b.bad[0]), len(wrs))
	}
	return nil
}

// postRecv wraps ibv_post_recv(3), like postSend.
func (q *ibvQP) postRecv(wrs []RecvWR) error {
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	nsge := 0
	for i := range wrs {
		nsge += len(wrs[i].SGE)
	}
	b := &q.recv
	if err := b.reserve(len(wrs), nsge); err != nil {
		return errnoError("PostRecv", unix.ENOMEM, "work-request buffers")
	}
	k := 0
	for i := range wrs {
		w := &wrs[i]
		b.descs[i] = C.struct_ibcoll_recv_desc{wr_id: C.uint64_t(w.ID), num_sge: C.uint32_t(len(w.SGE))}
		for _, s := range w.SGE {
			b.sges[k] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
			k++
		}
	}
	rc := C.ibcoll_post_recv(q.qp, &b.descs[0], C.int(len(wrs)), &b.sges[0], &b.wrs[0], &b.bad[0])
	if rc != 0 {
		return postError("PostRecv", "ibv_post_recv", unix.Errno(rc), int(b.bad[0]), len(wrs))
	}
	return nil
}

// postError says which request the provider refused: the ones before it
// were posted and will complete, so the caller must not repost them.
func postError(op, verb string, errno unix.Errno, bad, n int) error {
	detail := fmt.Sprintf("%s: wrs[%d] of %d refused", verb, bad, n)
	if bad > 0 {
		detail += fmt.Sprintf("; wrs[:%d] were posted", bad)
	}
	e := errnoError(op, errno, detail).(*Error)
	e.Posted = bad
	return e
}

// state wraps ibv_query_qp(3) for IBV_QP_STATE.
func (q *ibvQP) state() (QPState, error) {
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if rc, err := C.ibv_query_qp(q.qp, &a, C.IBV_QP_STATE, &ia); rc != 0 {
		return 0, errnoError("State", rcErrno(rc, err), "ibv_query_qp")
	}
	return QPState(a.qp_state), nil
}

// path wraps ibv_query_qp(3) for the address vector, partition key index and MTU.
func (q *ibvQP) path() (Path, error) {
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if rc, err := C.ibv_query_qp(q.qp, &a, C.IBV_QP_AV|C.IBV_QP_PKEY_INDEX|C.IBV_QP_PATH_MTU, &ia); rc != 0 {
		return Path{}, errnoError("Path", rcErrno(rc, err), "ibv_query_qp")
	}
	p := Path{PKeyIndex: int(a.pkey_index), ServiceLevel: int(a.ah_attr.sl), MTU: mtuBytes(int(a.path_mtu))}
	if a.ah_attr.is_global != 0 {
		p.TrafficClass = int(a.ah_attr.grh.traffic_class)
	}
	return p, nil
}

// toError moves the QP to IBV_QPS_ERR: outstanding requests flush.
func (q *ibvQP) toError() error {
	var a C.struct_ibv_qp_attr
	a.qp_state = C.IBV_QPS_ERR
	return q.modify("MoveToError", "ERR", &a, C.IBV_QP_STATE)
}

// close wraps ibv_destroy_qp(3); the post buffers go after the QP, which
// the provider may still read until it is destroyed.
func (q *ibvQP) close() error {
	if rc, err := C.ibv_destroy_qp(q.qp); rc != 0 {
		return errnoError("QP.Close", rcErrno(rc, err), "ibv_destroy_qp")
	}
	q.qp = nil
	q.sendMu.Lock()
	q.send.free()
	q.sendMu.Unlock()
	q.recvMu.Lock()
	q.recv.free()
	q.recvMu.Unlock()
	return nil
}
