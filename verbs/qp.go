package verbs

import (
	"fmt"
	"sync/atomic"
)

// QP is a reliable-connected queue pair. Posting is safe for concurrent
// use; Connect and Close serialize against it.
type QP struct {
	node
	pd        *PD
	cqs       []*CQ
	b         qpBackend
	cfg       QPConfig
	num       uint32
	connected atomic.Bool
}

// maxInline bounds QPConfig.MaxInline: real devices offer a few hundred
// bytes, and the soft provider keeps that much per send-queue slot.
const maxInline = 4096

// CreateQP wraps ibv_create_qp(3) and moves the new QP to INIT, so that
// receives can be posted before Connect.
func (p *PD) CreateQP(cfg QPConfig) (*QP, error) {
	const op = "CreateQP"
	if p == nil {
		return nil, invalid(op, "nil PD")
	}
	if cfg.Type == 0 {
		cfg.Type = QPTypeRC
	}
	switch {
	case p.kind == "":
		return nil, zeroObject(op, "PD")
	case cfg.Type != QPTypeRC:
		return nil, invalid(op, "QPConfig.Type %v is not supported, only RC", cfg.Type)
	case cfg.SendCQ == nil:
		return nil, invalid(op, "QPConfig.SendCQ is nil")
	case cfg.RecvCQ == nil:
		return nil, invalid(op, "QPConfig.RecvCQ is nil")
	case cfg.MaxSendWR <= 0:
		return nil, invalid(op, "QPConfig.MaxSendWR must be > 0, got %d", cfg.MaxSendWR)
	case cfg.MaxRecvWR < 0:
		return nil, invalid(op, "QPConfig.MaxRecvWR must be >= 0, got %d", cfg.MaxRecvWR)
	case cfg.MaxSGE < 0:
		return nil, invalid(op, "QPConfig.MaxSGE must be >= 0, got %d", cfg.MaxSGE)
	case cfg.MaxInline < 0:
		return nil, invalid(op, "QPConfig.MaxInline must be >= 0, got %d", cfg.MaxInline)
	case cfg.SendCQ.ctx != p.ctx || cfg.RecvCQ.ctx != p.ctx:
		return nil, invalid(op, "CQs and PD belong to different contexts")
	}
	attr := &p.ctx.attr
	switch {
	case cfg.MaxSendWR > attr.MaxQPWR:
		return nil, invalid(op, "QPConfig.MaxSendWR %d exceeds the device's max_qp_wr %d", cfg.MaxSendWR, attr.MaxQPWR)
	case cfg.MaxRecvWR > attr.MaxQPWR:
		return nil, invalid(op, "QPConfig.MaxRecvWR %d exceeds the device's max_qp_wr %d", cfg.MaxRecvWR, attr.MaxQPWR)
	case cfg.MaxSGE > attr.MaxSGE:
		return nil, invalid(op, "QPConfig.MaxSGE %d exceeds the device's max_sge %d", cfg.MaxSGE, attr.MaxSGE)
	case cfg.MaxInline > maxInline:
		return nil, invalid(op, "QPConfig.MaxInline %d exceeds %d bytes", cfg.MaxInline, maxInline)
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	cqs := []*CQ{cfg.SendCQ}
	if cfg.RecvCQ != cfg.SendCQ {
		cqs = append(cqs, cfg.RecvCQ)
	}
	if err := p.reserve(op, "PD"); err != nil {
		return nil, err
	}
	for i, cq := range cqs {
		if err := cq.reserve(op, "CQ"); err != nil {
			for _, c := range cqs[:i] {
				c.dropChild()
			}
			p.dropChild()
			return nil, err
		}
	}
	b, err := p.b.createQP(cfg, cfg.SendCQ.b, cfg.RecvCQ.b)
	if err != nil {
		for _, c := range cqs {
			c.dropChild()
		}
		p.dropChild()
		return nil, err
	}
	qp := &QP{pd: p, cqs: cqs, b: b, cfg: cfg, num: b.qpn()}
	qp.register("qp", 0)
	return qp, nil
}

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 {
	if q == nil {
		return 0
	}
	return q.num
}

// Info returns what a peer needs to connect to this QP.
func (q *QP) Info() QPInfo {
	if q == nil || q.b == nil {
		return QPInfo{}
	}
	return q.b.info()
}

// Connect moves the QP INIT→RTR→RTS (ibv_modify_qp(3)) towards remote,
// with LID addressing on InfiniBand and a GRH on RoCE. A QP connects once.
func (q *QP) Connect(remote QPInfo) error {
	if q == nil {
		return invalid("Connect", "nil QP")
	}
	if remote.QPN == 0 {
		return invalid("Connect", "remote QPN is 0")
	}
	if err := q.wlock("Connect", "QP"); err != nil {
		return err
	}
	defer q.mu.Unlock()
	if q.connected.Load() {
		return invalid("Connect", "QP %#x is already connected", q.num)
	}
	if err := q.b.connect(remote); err != nil {
		return err
	}
	q.connected.Store(true)
	return nil
}

// PostSend wraps ibv_post_send(3). All requests go down as one chain, so
// they cost one doorbell.
func (q *QP) PostSend(wrs ...SendWR) error {
	if q == nil {
		return invalid("PostSend", "nil QP")
	}
	if len(wrs) == 0 {
		return nil
	}
	if len(wrs) > q.cfg.MaxSendWR {
		return invalid("PostSend", "%d work requests in one post, the send queue holds %d", len(wrs), q.cfg.MaxSendWR)
	}
	for i := range wrs {
		if err := q.checkSend(i, &wrs[i]); err != nil {
			return err
		}
	}
	if err := q.rlock("PostSend", "QP"); err != nil {
		return err
	}
	defer q.mu.RUnlock()
	if !q.connected.Load() {
		return invalid("PostSend", "QP %#x is not connected", q.num)
	}
	return q.b.postSend(wrs)
}

func (q *QP) checkSend(i int, wr *SendWR) error {
	if !wr.Op.valid() {
		return invalid("PostSend", "wrs[%d].Op %v is not a valid opcode", i, wr.Op)
	}
	if len(wr.SGE) > q.cfg.MaxSGE {
		return invalid("PostSend", "wrs[%d] has %d SGEs, the QP allows %d", i, len(wr.SGE), q.cfg.MaxSGE)
	}
	if wr.Op.isAtomic() {
		if !q.pd.ctx.attr.AtomicCap {
			return newError("PostSend", ErrNotSupported, fmt.Sprintf("wrs[%d].Op %v: %s does no atomics (DeviceAttr.AtomicCap is false)", i, wr.Op, q.pd.ctx.info.Name))
		}
		if len(wr.SGE) != 1 || wr.SGE[0].Length != 8 {
			return invalid("PostSend", "wrs[%d]: an atomic needs exactly one 8-byte SGE", i)
		}
		if wr.RemoteAddr%8 != 0 {
			return invalid("PostSend", "wrs[%d]: atomic remote address %#x is not 8-byte aligned", i, wr.RemoteAddr)
		}
	}
	if wr.Inline {
		if wr.Op != OpSend && wr.Op != OpSendWithImm && wr.Op != OpRDMAWrite && wr.Op != OpRDMAWriteWithImm {
			return invalid("PostSend", "wrs[%d]: Inline applies to sends and writes, not %v", i, wr.Op)
		}
		n := 0
		for k, s := range wr.SGE {
			if s.Addr == 0 && s.Length > 0 {
				return invalid("PostSend", "wrs[%d].SGE[%d]: inline data at address 0", i, k)
			}
			if s.Length > 0 && q.pd.dev.has(s.LKey) {
				return invalid("PostSend", "wrs[%d].SGE[%d]: inline data in device memory (lkey %#x is a DM or dma-buf MR): the CPU copies inline data, so it must be host memory", i, k, s.LKey)
			}
			n += int(s.Length)
		}
		if n > q.cfg.MaxInline {
			return invalid("PostSend", "wrs[%d]: %d inline bytes exceed MaxInline %d", i, n, q.cfg.MaxInline)
		}
	}
	return nil
}

// PostRecv wraps ibv_post_recv(3). Receive buffers must be host memory: an SGE of a
// DM or dma-buf MR is refused (ErrInvalid), since mlx5 delivers a small send inside
// its completion and its library copies it into the buffer with the CPU
// (devkeys.go). GPU memory registered with RegMR is not recognised here and must not
// be posted either.
func (q *QP) PostRecv(wrs ...RecvWR) error {
	if q == nil {
		return invalid("PostRecv", "nil QP")
	}
	if len(wrs) == 0 {
		return nil
	}
	if len(wrs) > q.cfg.MaxRecvWR {
		return invalid("PostRecv", "%d work requests in one post, the receive queue holds %d", len(wrs), q.cfg.MaxRecvWR)
	}
	for i := range wrs {
		if len(wrs[i].SGE) > q.cfg.MaxSGE {
			return invalid("PostRecv", "wrs[%d] has %d SGEs, the QP allows %d", i, len(wrs[i].SGE), q.cfg.MaxSGE)
		}
		for k, s := range wrs[i].SGE {
			if s.Length > 0 && q.pd.dev.has(s.LKey) {
				return invalid("PostRecv", "wrs[%d].SGE[%d]: receive buffer in device memory (lkey %#x is a DM or dma-buf MR): mlx5 copies small sends into receive buffers with the CPU (scatter to CQE), so they must be host memory", i, k, s.LKey)
			}
		}
	}
	if err := q.rlock("PostRecv", "QP"); err != nil {
		return err
	}
	defer q.mu.RUnlock()
	return q.b.postRecv(wrs)
}

// Path is what a connected QP's packets carry and follow, as ibv_query_qp(3) reads it
// back: the partition key index, the service level, the GRH's traffic class (RoCE;
// 0 without a GRH) and the path MTU in bytes.
type Path struct {
	PKeyIndex    int
	ServiceLevel int
	TrafficClass int
	MTU          int
}

// Path wraps ibv_query_qp(3) for the QP's path: what Options.PKeyIndex,
// ServiceLevel and TrafficClass made of it. It is the zero Path before Connect.
func (q *QP) Path() (Path, error) {
	if q == nil {
		return Path{}, invalid("Path", "nil QP")
	}
	if err := q.rlock("Path", "QP"); err != nil {
		return Path{}, err
	}
	defer q.mu.RUnlock()
	if !q.connected.Load() {
		return Path{}, nil
	}
	return q.b.path()
}

// State wraps ibv_query_qp(3) for the QP state.
func (q *QP) State() (QPState, error) {
	if q == nil {
		return 0, invalid("State", "nil QP")
	}
	if err := q.rlock("State", "QP"); err != nil {
		return 0, err
	}
	defer q.mu.RUnlock()
	return q.b.state()
}

// MoveToError wraps ibv_modify_qp(3) to IBV_QPS_ERR: the QP stops
// executing work, outstanding work is flushed (completions with
// WR_FLUSH_ERR), and the peer sees its own requests to this QP fail. It is
// the fence a transport puts between itself and a peer it counts as
// failed: once it returns, that peer can no longer read or write this
// side's registered memory through the QP.
func (q *QP) MoveToError() error {
	if q == nil {
		return invalid("MoveToError", "nil QP")
	}
	if err := q.rlock("MoveToError", "QP"); err != nil {
		return err
	}
	defer q.mu.RUnlock()
	return q.b.toError()
}

// Close wraps ibv_destroy_qp(3).
func (q *QP) Close() error {
	if q == nil {
		return nil
	}
	if done, err := q.beginClose("QP.Close", "QP"); done {
		return err
	}
	if err := q.b.close(); err != nil {
		q.endClose(false)
		return err
	}
	q.endClose(true)
	q.pd.dropChild()
	for _, c := range q.cqs {
		c.dropChild()
	}
	q.unregister()
	return nil
}
