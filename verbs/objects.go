package verbs

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// node is the lifecycle shared by every object. Hot-path calls (post, poll,
// wait) hold mu shared, and Close holds it exclusively, so a backend object
// is never freed under a caller. Child counts live under their own small
// lock: creating or closing a child never waits for the parent's hot-path
// calls (a CQ.Wait blocked for seconds must not hold up CreateQP).
type node struct {
	mu       sync.RWMutex
	cmu      sync.Mutex // guards children, closing and closed
	closed   bool       // written under both locks, read under either
	closing  bool
	children int
}

// reserve counts a child about to be created; it fails if n is closed or
// being closed. A failed creation gives the count back with dropChild.
func (n *node) reserve(op, what string) error {
	n.cmu.Lock()
	defer n.cmu.Unlock()
	if n.closed || n.closing {
		return newError(op, ErrClosed, what+" is closed")
	}
	n.children++
	return nil
}

func (n *node) dropChild() {
	n.cmu.Lock()
	n.children--
	n.cmu.Unlock()
}

// rlock takes the read side for a hot-path call.
func (n *node) rlock(op, what string) error {
	n.mu.RLock()
	if n.closed {
		n.mu.RUnlock()
		return newError(op, ErrClosed, what+" is closed")
	}
	return nil
}

// wlock takes the write side for a call that changes the object's state.
func (n *node) wlock(op, what string) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return newError(op, ErrClosed, what+" is closed")
	}
	return nil
}

// beginClose marks n as closing, so that no child can be added, and takes
// the write lock. done is true when Close has nothing to do: n is closed
// already, or busy (err wraps ErrBusy). Otherwise the caller closes the
// backend and calls endClose.
func (n *node) beginClose(op, what string) (done bool, err error) {
	for {
		n.cmu.Lock()
		switch {
		case n.closed:
			n.cmu.Unlock()
			return true, nil
		case n.children > 0:
			c := n.children
			n.cmu.Unlock()
			return true, newError(op, ErrBusy, fmt.Sprintf("%s still has %d live child object(s)", what, c))
		case n.closing:
			// Another Close is running: wait for it, then look again.
			n.cmu.Unlock()
			n.mu.Lock()
			n.mu.Unlock()
			continue
		}
		n.closing = true
		n.cmu.Unlock()
		n.mu.Lock()
		return false, nil
	}
}

// endClose finishes what beginClose started.
func (n *node) endClose(ok bool) {
	n.cmu.Lock()
	n.closed = ok
	n.closing = false
	n.cmu.Unlock()
	n.mu.Unlock()
}

// live counts open objects per kind so that tests can prove nothing leaked.
var live struct {
	mu sync.Mutex
	n  map[string]int
}

func track(kind string, d int) {
	live.mu.Lock()
	if live.n == nil {
		live.n = map[string]int{}
	}
	live.n[kind] += d
	live.mu.Unlock()
}

// LiveObjects returns the number of open objects of each kind (context,
// pd, mr, cq, qp, dm). Objects are never released by finalizers, so a
// non-zero count at the end of a test is a leak.
func LiveObjects() map[string]int {
	live.mu.Lock()
	defer live.mu.Unlock()
	m := map[string]int{}
	for k, v := range live.n {
		if v != 0 {
			m[k] = v
		}
	}
	return m
}

// CheckLeaks returns an error naming every kind of object still open.
func CheckLeaks() error {
	m := LiveObjects()
	if len(m) == 0 {
		return nil
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	return fmt.Errorf("verbs: leaked objects: %s", strings.Join(parts, ", "))
}

// Context is an open device. It wraps ibv_open_device(3) on the ibv
// provider. A Context is safe for concurrent use.
type Context struct {
	node
	info DeviceInfo
	attr DeviceAttr // queried at Open: the limits arguments are checked against
	b    ctxBackend
}

// maxInline bounds QPConfig.MaxInline: real devices offer a few hundred
// bytes, and the soft provider keeps that much per send-queue slot.
const maxInline = 4096

// Name returns the device name (e.g. "mlx5_0", "rxe0", "soft0").
func (c *Context) Name() string { return c.info.Name }

// Provider returns "ibv" or "soft".
func (c *Context) Provider() string { return c.info.Provider }

// Info returns the device description taken when it was opened.
func (c *Context) Info() DeviceInfo { return c.info }

// Query wraps ibv_query_device_ex(3) and ibv_query_port(3).
func (c *Context) Query() (DeviceAttr, error) {
	if c == nil {
		return DeviceAttr{}, invalid("Query", "nil Context")
	}
	if err := c.rlock("Query", "context"); err != nil {
		return DeviceAttr{}, err
	}
	defer c.mu.RUnlock()
	return c.b.query()
}

// AllocPD wraps ibv_alloc_pd(3).
func (c *Context) AllocPD() (*PD, error) {
	if c == nil {
		return nil, invalid("AllocPD", "nil Context")
	}
	if err := c.reserve("AllocPD", "context"); err != nil {
		return nil, err
	}
	b, err := c.b.allocPD()
	if err != nil {
		c.dropChild()
		return nil, err
	}
	track("pd", 1)
	return &PD{ctx: c, b: b}, nil
}

// CreateCQ wraps ibv_create_cq(3) with a completion channel, so that
// waiting for completions can block instead of spinning.
func (c *Context) CreateCQ(depth int) (*CQ, error) {
	if c == nil {
		return nil, invalid("CreateCQ", "nil Context")
	}
	if depth <= 0 || depth > c.attr.MaxCQE {
		return nil, invalid("CreateCQ", "depth must be in [1, %d] (the device's max_cqe), got %d", c.attr.MaxCQE, depth)
	}
	if err := c.reserve("CreateCQ", "context"); err != nil {
		return nil, err
	}
	b, err := c.b.createCQ(depth)
	if err != nil {
		c.dropChild()
		return nil, err
	}
	track("cq", 1)
	return &CQ{ctx: c, b: b, depth: depth}, nil
}

// AllocDM wraps ibv_alloc_dm(3): NIC device memory (mlx5 MEMIC). Providers
// without device memory answer an error wrapping ErrNotSupported.
func (c *Context) AllocDM(size int) (*DM, error) {
	if c == nil {
		return nil, invalid("AllocDM", "nil Context")
	}
	if size <= 0 {
		return nil, invalid("AllocDM", "size must be > 0, got %d", size)
	}
	if err := c.reserve("AllocDM", "context"); err != nil {
		return nil, err
	}
	b, err := c.b.allocDM(size)
	if err != nil {
		c.dropChild()
		return nil, err
	}
	track("dm", 1)
	return &DM{ctx: c, b: b, size: size}, nil
}

// InjectFault makes the nth next operation of the given kind on this
// context fail (nth=1 is the next one). Only the soft provider injects;
// ibv answers ErrNotSupported.
func (c *Context) InjectFault(kind FaultKind, nth int) error {
	if c == nil {
		return invalid("InjectFault", "nil Context")
	}
	if nth < 1 {
		return invalid("InjectFault", "nth must be >= 1, got %d", nth)
	}
	if kind < FaultRegMR || kind > FaultCreateCQ {
		return invalid("InjectFault", "unknown fault kind %d", kind)
	}
	if err := c.rlock("InjectFault", "context"); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	return c.b.injectFault(kind, nth)
}

// SetCompletionDelay delays every completion of this context's work by d
// (soft only), to imitate a slow peer.
func (c *Context) SetCompletionDelay(d time.Duration) error {
	if c == nil {
		return invalid("SetCompletionDelay", "nil Context")
	}
	if d < 0 {
		return invalid("SetCompletionDelay", "delay must be >= 0, got %v", d)
	}
	if err := c.rlock("SetCompletionDelay", "context"); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	return c.b.setCompletionDelay(d)
}

// Close wraps ibv_close_device(3). It fails with ErrBusy while any PD, CQ
// or DM of the context is open. It is idempotent and nil-safe.
func (c *Context) Close() error {
	if c == nil {
		return nil
	}
	if done, err := c.beginClose("Context.Close", "context "+c.info.Name); done {
		return err
	}
	if err := c.b.close(); err != nil {
		c.endClose(false)
		return err
	}
	c.endClose(true)
	track("context", -1)
	return nil
}

// PD is a protection domain. It wraps struct ibv_pd.
type PD struct {
	node
	ctx *Context
	b   pdBackend
}

// Context returns the PD's device context.
func (p *PD) Context() *Context { return p.ctx }

// RegMR wraps ibv_reg_mr(3) for a Go slice. The slice is pinned while the
// MR lives, so the garbage collector cannot move or free it under the NIC.
func (p *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if p == nil {
		return nil, invalid("RegMR", "nil PD")
	}
	if buf == nil {
		return nil, invalid("RegMR", "buf is nil")
	}
	if len(buf) == 0 {
		return nil, invalid("RegMR", "buf is empty")
	}
	mr, err := p.regMR("RegMR", uintptr(unsafe.Pointer(&buf[0])), len(buf), access)
	if err != nil {
		return nil, err
	}
	mr.pin.Pin(&buf[0])
	mr.pinned = true
	return mr, nil
}

// RegMRAddr wraps ibv_reg_mr(3) for memory Go does not own (mmap, C
// allocations, device pointers). The caller keeps it valid while the MR
// lives.
func (p *PD) RegMRAddr(addr uintptr, length int, access Access) (*MR, error) {
	if p == nil {
		return nil, invalid("RegMRAddr", "nil PD")
	}
	if addr == 0 {
		return nil, invalid("RegMRAddr", "addr is 0")
	}
	if length <= 0 {
		return nil, invalid("RegMRAddr", "length must be > 0, got %d", length)
	}
	return p.regMR("RegMRAddr", addr, length, access)
}

func (p *PD) regMR(op string, addr uintptr, length int, access Access) (*MR, error) {
	if err := access.validate(); err != nil {
		return nil, invalid(op, "%v", err)
	}
	if err := p.reserve(op, "PD"); err != nil {
		return nil, err
	}
	b, err := p.b.regMR(addr, length, access)
	if err != nil {
		p.dropChild()
		return nil, err
	}
	track("mr", 1)
	return &MR{pd: p, b: b, addr: uint64(addr), length: length, lkey: b.lkey(), rkey: b.rkey(), access: access}, nil
}

// RegDMMR wraps ibv_reg_dm_mr(3) with IBV_ACCESS_ZERO_BASED: the MR's
// addresses are offsets into the DM region, starting at offset.
func (p *PD) RegDMMR(dm *DM, offset, length int, access Access) (*MR, error) {
	const op = "RegDMMR"
	if p == nil {
		return nil, invalid(op, "nil PD")
	}
	if dm == nil {
		return nil, invalid(op, "dm is nil")
	}
	if offset < 0 || length <= 0 || offset > dm.size || length > dm.size-offset {
		return nil, invalid(op, "offset %d length %d outside the %d-byte DM", offset, length, dm.size)
	}
	if err := access.validate(); err != nil {
		return nil, invalid(op, "%v", err)
	}
	if dm.ctx != p.ctx {
		return nil, invalid(op, "dm and PD belong to different contexts")
	}
	if err := p.reserve(op, "PD"); err != nil {
		return nil, err
	}
	if err := dm.reserve(op, "DM"); err != nil {
		p.dropChild()
		return nil, err
	}
	b, err := p.b.regDMMR(dm.b, offset, length, access)
	if err != nil {
		dm.dropChild()
		p.dropChild()
		return nil, err
	}
	track("mr", 1)
	return &MR{pd: p, dm: dm, b: b, addr: 0, length: length, lkey: b.lkey(), rkey: b.rkey(), access: access}, nil
}

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
	track("qp", 1)
	return &QP{pd: p, cqs: cqs, b: b, cfg: cfg, num: b.qpn()}, nil
}

// Close wraps ibv_dealloc_pd(3). It fails with ErrBusy while MRs or QPs
// of the PD are open.
func (p *PD) Close() error {
	if p == nil {
		return nil
	}
	if done, err := p.beginClose("PD.Close", "PD"); done {
		return err
	}
	if err := p.b.close(); err != nil {
		p.endClose(false)
		return err
	}
	p.endClose(true)
	p.ctx.dropChild()
	track("pd", -1)
	return nil
}

// MR is a registered memory region. Its keys and address are fixed at
// registration, so reading them needs no lock.
type MR struct {
	node
	pd     *PD
	dm     *DM
	b      mrBackend
	addr   uint64
	length int
	lkey   uint32
	rkey   uint32
	access Access
	pin    runtime.Pinner
	pinned bool
}

// LKey is the local key, for SGEs.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey is the remote key, for peers' RDMA requests.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr is the first address of the region: its virtual address, or 0 for
// a zero-based DM MR.
func (m *MR) Addr() uint64 { return m.addr }

// Len is the length of the region in bytes.
func (m *MR) Len() int { return m.length }

// Access returns the access flags the region was registered with.
func (m *MR) Access() Access { return m.access }

// Close wraps ibv_dereg_mr(3) and unpins the Go memory behind the MR.
func (m *MR) Close() error {
	if m == nil {
		return nil
	}
	if done, err := m.beginClose("MR.Close", "MR"); done {
		return err
	}
	if err := m.b.close(); err != nil {
		m.endClose(false)
		return err
	}
	m.endClose(true)
	if m.pinned {
		m.pin.Unpin()
		m.pinned = false
	}
	m.pd.dropChild()
	if m.dm != nil {
		m.dm.dropChild()
	}
	track("mr", -1)
	return nil
}

// CQ is a completion queue.
type CQ struct {
	node
	ctx   *Context
	b     cqBackend
	depth int
}

// Depth returns the number of entries the CQ was created with.
func (c *CQ) Depth() int { return c.depth }

// Poll wraps ibv_poll_cq(3): it fills wcs with up to len(wcs) completions
// and returns how many it filled. It never blocks.
func (c *CQ) Poll(wcs []WC) (int, error) {
	if c == nil {
		return 0, invalid("Poll", "nil CQ")
	}
	if len(wcs) == 0 {
		return 0, nil
	}
	if err := c.rlock("Poll", "CQ"); err != nil {
		return 0, err
	}
	defer c.mu.RUnlock()
	return c.b.poll(wcs)
}

// Wait blocks until the CQ may hold completions, or ctx ends. It arms the
// completion channel (ibv_req_notify_cq(3), ibv_get_cq_event(3)) and so
// uses no CPU while waiting. It may return early; poll again after it.
func (c *CQ) Wait(ctx context.Context) error {
	if c == nil {
		return invalid("Wait", "nil CQ")
	}
	if ctx == nil {
		return invalid("Wait", "nil context.Context")
	}
	if err := c.rlock("Wait", "CQ"); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	return c.b.wait(ctx)
}

// Close wraps ibv_destroy_cq(3). It fails with ErrBusy while a QP uses the
// CQ. It waits for concurrent Poll and Wait calls to return, so cancel the
// context of a blocked Wait before closing.
func (c *CQ) Close() error {
	if c == nil {
		return nil
	}
	if done, err := c.beginClose("CQ.Close", "CQ"); done {
		return err
	}
	if err := c.b.close(); err != nil {
		c.endClose(false)
		return err
	}
	c.endClose(true)
	c.ctx.dropChild()
	track("cq", -1)
	return nil
}

// DM is a region of NIC device memory. The CPU cannot address it; data
// moves with CopyTo/CopyFrom or with RDMA through a DM MR.
type DM struct {
	node
	ctx  *Context
	b    dmBackend
	size int
}

// Len returns the size of the region.
func (d *DM) Len() int { return d.size }

func (d *DM) checkCopy(op string, offset, n int) error {
	if offset < 0 || offset%4 != 0 {
		return invalid(op, "offset %d must be a non-negative multiple of 4", offset)
	}
	if n%4 != 0 {
		return invalid(op, "length %d must be a multiple of 4", n)
	}
	if n < 0 || offset > d.size || n > d.size-offset {
		return invalid(op, "offset %d + length %d exceeds the %d-byte DM", offset, n, d.size)
	}
	return nil
}

// CopyTo wraps ibv_memcpy_to_dm(3). Offset and length must be multiples
// of 4: device memory is written in 4-byte words.
func (d *DM) CopyTo(offset int, src []byte) error {
	if d == nil {
		return invalid("CopyTo", "nil DM")
	}
	if err := d.checkCopy("CopyTo", offset, len(src)); err != nil {
		return err
	}
	if err := d.rlock("CopyTo", "DM"); err != nil {
		return err
	}
	defer d.mu.RUnlock()
	if len(src) == 0 {
		return nil
	}
	return d.b.copyTo(offset, src)
}

// CopyFrom wraps ibv_memcpy_from_dm(3), with the same alignment rules.
func (d *DM) CopyFrom(dst []byte, offset int) error {
	if d == nil {
		return invalid("CopyFrom", "nil DM")
	}
	if err := d.checkCopy("CopyFrom", offset, len(dst)); err != nil {
		return err
	}
	if err := d.rlock("CopyFrom", "DM"); err != nil {
		return err
	}
	defer d.mu.RUnlock()
	if len(dst) == 0 {
		return nil
	}
	return d.b.copyFrom(dst, offset)
}

// Close wraps ibv_free_dm(3). It fails with ErrBusy while a DM MR lives,
// as the kernel does.
func (d *DM) Close() error {
	if d == nil {
		return nil
	}
	if done, err := d.beginClose("DM.Close", "DM"); done {
		return err
	}
	if err := d.b.close(); err != nil {
		d.endClose(false)
		return err
	}
	d.endClose(true)
	d.ctx.dropChild()
	track("dm", -1)
	return nil
}

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

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.num }

// Info returns what a peer needs to connect to this QP.
func (q *QP) Info() QPInfo {
	if q == nil {
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
			n += int(s.Length)
		}
		if n > q.cfg.MaxInline {
			return invalid("PostSend", "wrs[%d]: %d inline bytes exceed MaxInline %d", i, n, q.cfg.MaxInline)
		}
	}
	return nil
}

// PostRecv wraps ibv_post_recv(3).
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
	}
	if err := q.rlock("PostRecv", "QP"); err != nil {
		return err
	}
	defer q.mu.RUnlock()
	return q.b.postRecv(wrs)
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

// InjectError moves the QP to the error state (ibv_modify_qp(3) to
// IBV_QPS_ERR): outstanding work is flushed, and the peer sees its own
// requests fail. Tests and fault injection use it on every provider.
func (q *QP) InjectError() error {
	if q == nil {
		return invalid("InjectError", "nil QP")
	}
	if err := q.rlock("InjectError", "QP"); err != nil {
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
	track("qp", -1)
	return nil
}
