package tlmlx5

import (
	gocontext "context"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
	"golang.org/x/sys/unix"
)

// Sizes of the wire-up. Every peer has one RC QP. Its control block is a ring of
// receive slots that the peer's control messages (ready-to-receive with an rkey,
// aborts, completion agreement) land in, and that data writes with immediate consume;
// each slot has a receive posted at all times, and is posted again as soon as it is
// read. The number of slots is the peer's credit: past it, RNR retry (infinite on this
// TL's QPs) holds the sender back until the receiver reposts.
const (
	slotSize    = 256
	sqDepth     = 64
	maxSGE      = 4
	maxWRBytes  = 1 << 30
	wcBatch     = 64
	ctlKindRTR  = 0x10
	ctlKindColl = 0x20
	rtrLen      = 48
)

func slotsFor(n int) int {
	if n > 16 {
		return 16
	}
	return 32
}

// Work-request IDs: the kind in the top bits, then the peer or task, then the slot or
// operation.
const (
	idRecv = 1 << 62
	idCtl  = 2 << 62
	idData = 3 << 62
	idKind = 3 << 62
)

type team struct {
	c      *context
	p      coll.TeamParams
	rank   int
	size   int
	slots  int
	cq     *verbs.CQ
	peers  []*peer // nil at this rank
	cb     ctlBlock
	sb     hostRegion // control messages being sent: sqDepth slots per peer
	cache  *regCache
	wcs    []verbs.WC
	rbuf   [slotSize]byte
	tasks  map[uint64]*task
	by16   map[uint16]*task
	byID   map[uint32]*task
	nextID uint32
	stash  map[uint64][]rtr
	broken error
	closed bool
}

type peer struct {
	rank    int
	qp      *verbs.QP
	down    bool
	posted  int // work requests in the send queue
	queue   sendRing
	ctlFree []int32
	ctlSGE  [][]verbs.SGE
	batch   []verbs.SendWR
	recvs   []verbs.RecvWR // one per slot, ready to post
	repost  []verbs.RecvWR
}

// hostRegion is registered mmap'd memory.
type hostRegion struct {
	mem []byte
	mr  *verbs.MR
}

func newHostRegion(pd *verbs.PD, n int, access verbs.Access) (hostRegion, error) {
	m, err := unix.Mmap(-1, 0, (n+4095)&^4095, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return hostRegion{}, fmt.Errorf("tlmlx5: mmap %d bytes: %w", n, err)
	}
	_ = unix.Madvise(m, unix.MADV_DONTFORK)
	mr, err := pd.RegMRAddr(uintptr(unsafe.Pointer(&m[0])), n, access)
	if err != nil {
		_ = unix.Munmap(m)
		return hostRegion{}, fmt.Errorf("tlmlx5: register %d bytes: %w", n, err)
	}
	return hostRegion{mem: m[:n], mr: mr}, nil
}

func (h *hostRegion) close() error {
	if h.mr != nil {
		if err := h.mr.Close(); err != nil {
			return err
		}
		h.mr = nil
	}
	if h.mem != nil {
		if err := unix.Munmap(h.mem[:cap(h.mem)]); err != nil {
			return err
		}
		h.mem = nil
	}
	return nil
}

func (h *hostRegion) addr(off int) uint64 { return h.mr.Addr() + uint64(off) }

// ctlBlock holds the receive slots: in NIC device memory when the device has it (the
// mlx5 habit: control traffic then never crosses PCIe to host memory), else in host
// memory.
type ctlBlock struct {
	dm   *verbs.DM
	mr   *verbs.MR
	host hostRegion
	n    int
}

func newCtlBlock(c *context, n int) (ctlBlock, error) {
	if c.attr.MaxDMSize >= uint64(n) {
		if dm, err := c.dev.AllocDM(n); err == nil {
			mr, err := c.pd.RegDMMR(dm, 0, n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			if err == nil {
				return ctlBlock{dm: dm, mr: mr, n: n}, nil
			}
			_ = dm.Close()
		}
	}
	h, err := newHostRegion(c.pd, n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return ctlBlock{}, err
	}
	return ctlBlock{host: h, mr: h.mr, n: n}, nil
}

func (b *ctlBlock) read(dst []byte, off int) error {
	if b.dm != nil {
		return b.dm.CopyFrom(dst, off)
	}
	copy(dst, b.host.mem[off:])
	return nil
}

func (b *ctlBlock) close() error {
	if b.dm != nil {
		if b.mr != nil {
			if err := b.mr.Close(); err != nil {
				return err
			}
			b.mr = nil
		}
		if err := b.dm.Close(); err != nil {
			return err
		}
		b.dm = nil
		return nil
	}
	b.mr = nil
	return b.host.close()
}

// InDM reports whether the control block lives in device memory (for tests).
func (b *ctlBlock) InDM() bool { return b.dm != nil }

func newTeam(c *context, p coll.TeamParams) (_ *team, _ []byte, err error) {
	n := p.Size
	t := &team{c: c, p: p, rank: p.Rank, size: n, slots: slotsFor(n), peers: make([]*peer, n),
		wcs: make([]verbs.WC, wcBatch), tasks: map[uint64]*task{}, by16: map[uint16]*task{},
		byID: map[uint32]*task{}, stash: map[uint64][]rtr{}}
	t.cache = newRegCache(c.pd)
	defer func() {
		if err != nil {
			err = errors.Join(err, t.teardown())
		}
	}()
	addr := make([]byte, n*qpInfoLen)
	if n == 1 {
		return t, addr, nil
	}
	if t.cq, err = c.dev.CreateCQ((n-1)*(sqDepth+t.slots) + 16); err != nil {
		return nil, nil, fmt.Errorf("tlmlx5: %w", err)
	}
	if t.cb, err = newCtlBlock(c, (n-1)*t.slots*slotSize); err != nil {
		return nil, nil, err
	}
	if t.sb, err = newHostRegion(c.pd, (n-1)*sqDepth*slotSize, verbs.AccessLocalWrite); err != nil {
		return nil, nil, err
	}
	for r := 0; r < n; r++ {
		if r == t.rank {
			continue
		}
		pe := &peer{rank: r, batch: make([]verbs.SendWR, 0, sqDepth), recvs: make([]verbs.RecvWR, t.slots),
			repost: make([]verbs.RecvWR, 0, t.slots), ctlSGE: make([][]verbs.SGE, sqDepth)}
		pe.queue.init(16)
		t.peers[r] = pe
		pe.qp, err = c.pd.CreateQP(verbs.QPConfig{SendCQ: t.cq, RecvCQ: t.cq, MaxSendWR: sqDepth,
			MaxRecvWR: t.slots, MaxSGE: maxSGE})
		if err != nil {
			return nil, nil, fmt.Errorf("tlmlx5: QP to rank %d: %w", r, err)
		}
		pi := t.peerIndex(r)
		for s := 0; s < t.slots; s++ {
			off := (pi*t.slots + s) * slotSize
			pe.recvs[s] = verbs.RecvWR{ID: idRecv | uint64(r)<<32 | uint64(s),
				SGE: []verbs.SGE{{Addr: t.cb.mr.Addr() + uint64(off), Length: slotSize, LKey: t.cb.mr.LKey()}}}
		}
		for s := sqDepth - 1; s >= 0; s-- {
			pe.ctlFree = append(pe.ctlFree, int32(s))
			off := (pi*sqDepth + s) * slotSize
			pe.ctlSGE[s] = []verbs.SGE{{Addr: t.sb.addr(off), LKey: t.sb.mr.LKey()}}
		}
		if err = pe.qp.PostRecv(pe.recvs...); err != nil {
			return nil, nil, fmt.Errorf("tlmlx5: QP to rank %d: %w", r, err)
		}
		info, err := pe.qp.Info().MarshalBinary()
		if err != nil {
			return nil, nil, err
		}
		copy(addr[r*qpInfoLen:], info)
	}
	return t, addr, nil
}

var qpInfoLen = func() int { b, _ := verbs.QPInfo{}.MarshalBinary(); return len(b) }()

// peerIndex numbers the peers 0..n-2 for slot layout.
func (t *team) peerIndex(r int) int {
	if r > t.rank {
		return r - 1
	}
	return r
}

func (t *team) Connect(addrs [][]byte) error {
	if len(addrs) != t.size {
		return fmt.Errorf("tlmlx5: Connect: %d addresses for %d ranks", len(addrs), t.size)
	}
	for r, pe := range t.peers {
		if pe == nil {
			continue
		}
		a := addrs[r]
		if len(a) != t.size*qpInfoLen {
			return fmt.Errorf("tlmlx5: Connect: rank %d's address is %d bytes, want %d", r, len(a), t.size*qpInfoLen)
		}
		var info verbs.QPInfo
		if err := info.UnmarshalBinary(a[t.rank*qpInfoLen : (t.rank+1)*qpInfoLen]); err != nil {
			return fmt.Errorf("tlmlx5: Connect: rank %d: %w", r, err)
		}
		if err := pe.qp.Connect(info); err != nil {
			return fmt.Errorf("tlmlx5: Connect to rank %d: %w", r, err)
		}
	}
	return nil
}

func (t *team) MaxCtl() int { return slotSize - 1 }

func (t *team) Register(b *mem.Buffer) (asym.Registration, error) {
	if b == nil || b.Type() != mem.Host {
		return nil, fmt.Errorf("tlmlx5: register: only host memory is registered by this TL: %w", mem.ErrNotSupported)
	}
	e, err := t.cache.acquire(nil, b, 0, 0, nil)
	if err != nil {
		return nil, err
	}
	e.scratch = true
	return &scratchReg{t: t, e: e}, nil
}

func (t *team) Broken() error { return t.broken }

func (t *team) PeerDown(p int) bool {
	pe := t.peers[p]
	return pe == nil || pe.down
}

func (t *team) Fence(p int, why string) {
	pe := t.peers[p]
	if pe == nil || pe.down {
		return
	}
	t.peerFailed(pe, errors.New(why))
}

// peerFailed takes a peer out of the team. Its QP goes to the error state
// whatever failed (a post, a completion, a control-block read): a peer
// counted as down must not be able to write into this rank's buffers any
// more, since they may be freed once nothing is waited for.
func (t *team) peerFailed(pe *peer, err error) {
	if pe.down {
		return
	}
	_ = pe.qp.MoveToError()
	pe.down = true
	pe.queue.clear()
	if t.broken == nil {
		t.broken = fmt.Errorf("tlmlx5: queue pair to rank %d failed: %w", pe.rank, err)
	}
}

func (t *team) WaitEvent(ctx gocontext.Context) error {
	if t.cq == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	return t.cq.Wait(ctx)
}

// SendCtl queues a control message of coll.
func (t *team) SendCtl(p int, msg []byte) error {
	if len(msg) > slotSize-1 {
		return fmt.Errorf("tlmlx5: control message of %d bytes, max %d: %w", len(msg), slotSize-1, coll.ErrInvalid)
	}
	pe := t.peers[p]
	if pe == nil || pe.down {
		return fmt.Errorf("tlmlx5: rank %d is down: %w", p, coll.ErrTeamBroken)
	}
	it := pe.queue.push()
	it.kind = itemCtl
	it.n = 1 + copy(it.payload[1:], msg)
	it.payload[0] = ctlKindColl
	t.flush(pe)
	return nil
}

// sendRTR queues a ready-to-receive: this rank's buffer for tag of task k.
func (t *team) sendRTR(k *task, o *op) {
	pe := t.peers[o.peer]
	if pe == nil || pe.down {
		return
	}
	it := pe.queue.push()
	it.kind = itemCtl
	it.k, it.post = k, k.post
	b := it.payload[:rtrLen]
	b[0] = ctlKindRTR
	binary.LittleEndian.PutUint64(b[4:], k.seq)
	binary.LittleEndian.PutUint32(b[12:], k.post)
	binary.LittleEndian.PutUint32(b[16:], uint32(o.tag))
	binary.LittleEndian.PutUint64(b[20:], o.dst.addr)
	binary.LittleEndian.PutUint32(b[28:], o.dst.rkey)
	binary.LittleEndian.PutUint64(b[32:], uint64(o.n))
	binary.LittleEndian.PutUint32(b[40:], k.sig)
	it.n = rtrLen
}

// flush posts what the send queue of pe has room for, in order, as one chain.
func (t *team) flush(pe *peer) {
	if pe.down {
		return
	}
	b := pe.batch[:0]
	for pe.queue.len() > 0 && pe.posted+len(b) < sqDepth {
		it := pe.queue.front()
		switch it.kind {
		case itemCtl:
			if it.k != nil && (it.k.aborted || it.k.post != it.post) {
				pe.queue.pop()
				continue
			}
			if len(pe.ctlFree) == 0 {
				goto post
			}
			s := pe.ctlFree[len(pe.ctlFree)-1]
			pe.ctlFree = pe.ctlFree[:len(pe.ctlFree)-1]
			off := (t.peerIndex(pe.rank)*sqDepth + int(s)) * slotSize
			copy(t.sb.mem[off:off+it.n], it.payload[:it.n])
			sge := pe.ctlSGE[s]
			sge[0].Length = uint32(it.n)
			b = append(b, verbs.SendWR{ID: idCtl | uint64(pe.rank)<<32 | uint64(s), Op: verbs.OpSend, SGE: sge, Signaled: true})
		case itemData:
			k, o := it.k, &it.k.ops[it.op]
			if k.aborted || k.post != it.post {
				pe.queue.pop()
				continue
			}
			b = append(b, o.wrs[it.wr])
			k.outstanding++
		}
		pe.queue.pop()
	}
post:
	if len(b) == 0 {
		return
	}
	pe.batch = b[:0]
	if err := pe.qp.PostSend(b...); err != nil {
		// Nothing of a failed chain was posted; the QP cannot be trusted.
		for i := range b {
			if b[i].ID&idKind == idData {
				if k := t.byID[uint32(b[i].ID>>32)&0x3fffffff]; k != nil {
					k.outstanding--
				}
			}
		}
		t.peerFailed(pe, err)
		return
	}
	pe.posted += len(b)
}

// Poll processes completions.
func (t *team) Poll(h coll.CtlHandler) error {
	if t.cq == nil || t.closed {
		return nil
	}
	for round := 0; round < 8; round++ {
		n, err := t.cq.Poll(t.wcs)
		if err != nil {
			return fmt.Errorf("tlmlx5: poll: %w", err)
		}
		for i := 0; i < n; i++ {
			t.complete(&t.wcs[i], h)
		}
		for _, pe := range t.peers {
			if pe != nil && len(pe.repost) > 0 {
				if !pe.down {
					if err := pe.qp.PostRecv(pe.repost...); err != nil {
						t.peerFailed(pe, err)
					}
				}
				pe.repost = pe.repost[:0]
			}
		}
		if n < len(t.wcs) {
			break
		}
	}
	for _, pe := range t.peers {
		if pe != nil && pe.queue.len() > 0 {
			t.flush(pe)
		}
	}
	return nil
}

func (t *team) complete(wc *verbs.WC, h coll.CtlHandler) {
	switch wc.ID & idKind {
	case idRecv:
		r, s := int(wc.ID>>32)&0xfffff, int(wc.ID&0xffffffff)
		pe := t.peers[r]
		if wc.Status != verbs.WCSuccess {
			t.peerFailed(pe, wc.Err())
			return
		}
		pe.repost = append(pe.repost, pe.recvs[s])
		if wc.HasImm {
			t.onData(r, wc.Imm)
			return
		}
		n := int(wc.Bytes)
		if n < 1 || n > slotSize {
			return
		}
		off := (t.peerIndex(r)*t.slots + s) * slotSize
		buf := t.rbuf[:(n+3)&^3]
		if err := t.cb.read(buf, off); err != nil {
			t.peerFailed(pe, err)
			return
		}
		switch buf[0] {
		case ctlKindColl:
			h.OnCtl(r, buf[1:n])
		case ctlKindRTR:
			if n >= rtrLen {
				t.onRTR(r, buf[:rtrLen])
			}
		}
	case idCtl:
		r, s := int(wc.ID>>32)&0xfffff, int32(wc.ID&0xffffffff)
		pe := t.peers[r]
		pe.posted--
		pe.ctlFree = append(pe.ctlFree, s)
		if wc.Status != verbs.WCSuccess {
			t.peerFailed(pe, wc.Err())
		}
	case idData:
		k := t.byID[uint32(wc.ID>>32)&0x3fffffff]
		if k == nil {
			return
		}
		o := &k.ops[int(wc.ID&0xffffffff)]
		pe := t.peers[o.peer]
		pe.posted--
		k.outstanding--
		if wc.Status != verbs.WCSuccess {
			t.peerFailed(pe, wc.Err())
			return
		}
		o.wrsLeft--
		if o.wrsLeft == 0 && !k.aborted {
			k.opDone(o)
		}
	}
}

// onData is the arrival of tag's data for the task with sequence number seq16.
func (t *team) onData(from int, imm uint32) {
	k := t.by16[uint16(imm>>16)]
	if k == nil || k.aborted {
		return
	}
	tag := int(imm & 0xffff)
	if tag >= len(k.recvByTag) || k.recvByTag[tag] < 0 {
		k.fail(fmt.Errorf("tlmlx5: %v #%d: rank %d wrote tag %d, which this rank does not expect", k.spec.Type, k.seq, from, tag))
		return
	}
	o := &k.ops[k.recvByTag[tag]]
	if o.peer != from || o.state != opPosted {
		k.fail(fmt.Errorf("tlmlx5: %v #%d: unexpected data for tag %d from rank %d", k.spec.Type, k.seq, tag, from))
		return
	}
	k.opDone(o)
}

type rtr struct {
	peer int
	seq  uint64
	post uint32
	tag  int
	addr uint64
	rkey uint32
	n    int
	sig  uint32
}

func (t *team) onRTR(from int, b []byte) {
	m := rtr{peer: from, seq: binary.LittleEndian.Uint64(b[4:]), post: binary.LittleEndian.Uint32(b[12:]),
		tag: int(binary.LittleEndian.Uint32(b[16:])), addr: binary.LittleEndian.Uint64(b[20:]),
		rkey: binary.LittleEndian.Uint32(b[28:]), n: int(binary.LittleEndian.Uint64(b[32:])),
		sig: binary.LittleEndian.Uint32(b[40:])}
	k := t.tasks[m.seq]
	if k == nil {
		if m.seq >= t.p.NextSeq() {
			t.stash[m.seq] = append(t.stash[m.seq], m)
		}
		return
	}
	k.onRTR(m)
}

// teardown releases everything in reverse order of creation.
func (t *team) teardown() error {
	var errs []error
	for _, pe := range t.peers {
		if pe != nil && pe.qp != nil {
			if err := pe.qp.Close(); err != nil {
				errs = append(errs, err)
			} else {
				pe.qp = nil
			}
		}
	}
	if err := t.cache.close(); err != nil {
		errs = append(errs, err)
	}
	if err := t.sb.close(); err != nil {
		errs = append(errs, err)
	}
	if err := t.cb.close(); err != nil {
		errs = append(errs, err)
	}
	if t.cq != nil {
		if err := t.cq.Close(); err != nil {
			errs = append(errs, err)
		} else {
			t.cq = nil
		}
	}
	return errors.Join(errs...)
}

func (t *team) Close() error {
	if t.closed {
		return nil
	}
	if len(t.tasks) > 0 {
		return fmt.Errorf("tlmlx5: %d task(s) open: %w", len(t.tasks), coll.ErrBusy)
	}
	if err := t.teardown(); err != nil {
		return fmt.Errorf("tlmlx5: team close: %w", err)
	}
	t.closed = true
	t.c.mu.Lock()
	t.c.teams--
	t.c.mu.Unlock()
	return nil
}

// sendRing is a FIFO of queued sends that grows when full: steady state reuses it.
type sendRing struct {
	items      []sendItem
	head, size int
}

const (
	itemCtl = iota + 1
	itemData
)

type sendItem struct {
	kind    uint8
	k       *task
	post    uint32
	op      int32
	wr      int32
	n       int
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
	it.k = nil
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
