package tlmlx5

import (
	"errors"
	"fmt"
	"io"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// team is one rank's endpoint of a team.
type team struct {
	c       *context
	p       driver.TeamParams
	rank    int
	size    int
	slots   int
	cq      *verbs.CQ
	peers   []*peer // nil at this rank
	cb      ctlBlock
	sb      hostRegion // control messages being sent: sqDepth slots per peer
	cache   *regCache
	wcs     []verbs.WC
	rbuf    [slotSize]byte
	credits [maxCredits]uint16 // decoding room
	tasks   map[uint64]*task
	bySeq   map[uint16]*task // routing of data writes by their immediate (seqKey)
	byID    map[uint32]*task // routing of data completions by their wrID
	nextID  uint32
	stash   map[uint64][]rtr // ready-to-receives of tasks not created yet
	// srcWait: tasks with operations waiting for their staged source (srcwait.go).
	srcWait map[*task]struct{}
	// The eager path (eager.go): its sizes, and the headers kept for receives that
	// have not started (at most maxEarly).
	eagerMax, eagerSlots int
	early                []eagerHdr
	maxEarly             int
	cached               []*task // closed tasks kept for reuse, oldest first (taskcache.go)
	broken               error
	closed               bool
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
	eager   *eagerPeer // nil until the QP is usable
}

func newTeam(c *context, p driver.TeamParams) (_ *team, _ []byte, err error) {
	n := p.Size
	t := &team{c: c, p: p, rank: p.Rank, size: n, slots: slotsFor(n), peers: make([]*peer, n),
		wcs: make([]verbs.WC, wcBatch), tasks: map[uint64]*task{}, bySeq: map[uint16]*task{},
		byID: map[uint32]*task{}, stash: map[uint64][]rtr{}, srcWait: map[*task]struct{}{}}
	t.cache = newRegCache(c.pd)
	if n > 1 {
		t.eagerMax, t.eagerSlots = eagerMaxFor(n), eagerSlotsFor(n)
		t.maxEarly = (n-1)*t.eagerSlots + maxEarlyHeaders
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.teardown())
		}
	}()
	// The address is every peer's QP info, then the kind of this rank's control
	// block (1: device memory), which Connect agrees on.
	addr := make([]byte, n*qpInfoLen+1)
	if n == 1 {
		return t, addr, nil
	}
	if t.cq, err = c.dev.CreateCQ((n-1)*(sqDepth+t.slots) + 16); err != nil {
		return nil, nil, fmt.Errorf("tlmlx5: %w", err)
	}
	if t.cb, err = newCtlBlock(c, (n-1)*t.slots*slotSize); err != nil {
		return nil, nil, err
	}
	if t.cb.inDM() {
		addr[n*qpInfoLen] = 1
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
		for s := sqDepth - 1; s >= 0; s-- {
			pe.ctlFree = append(pe.ctlFree, int32(s))
			pe.ctlSGE[s] = []verbs.SGE{{Addr: t.sb.addr(t.sendSlot(r, s)), LKey: t.sb.mr.LKey()}}
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

// recvSlot is the offset of receive slot s of peer r in the control block.
func (t *team) recvSlot(r, s int) int { return (t.peerIndex(r)*t.slots + s) * slotSize }

// sendSlot is the offset of send slot s to peer r in the send block.
func (t *team) sendSlot(r, s int) int { return (t.peerIndex(r)*sqDepth + s) * slotSize }

// parseAddrs reads the team's addresses, which other processes sent: rank r's address
// is every rank's QP info for r, then its control block's kind (1: device memory).
// It returns the QP info each peer made for rank me, and whether every rank's control
// block is device memory.
func parseAddrs(addrs [][]byte, me int) ([]verbs.QPInfo, bool, error) {
	n := len(addrs)
	if me < 0 || me >= n {
		return nil, false, fmt.Errorf("tlmlx5: Connect: rank %d of %d addresses: %w", me, n, driver.ErrInvalid)
	}
	infos := make([]verbs.QPInfo, n)
	allDM := true
	for r, a := range addrs {
		if len(a) != n*qpInfoLen+1 {
			return nil, false, fmt.Errorf("tlmlx5: Connect: rank %d's address is %d bytes, want %d: %w", r, len(a), n*qpInfoLen+1, driver.ErrInvalid)
		}
		switch a[n*qpInfoLen] {
		case 0:
			allDM = false
		case 1:
		default:
			return nil, false, fmt.Errorf("tlmlx5: Connect: rank %d's control-block kind is %d, want 0 or 1: %w", r, a[n*qpInfoLen], driver.ErrInvalid)
		}
		if r == me {
			continue
		}
		if err := infos[r].UnmarshalBinary(a[me*qpInfoLen : (me+1)*qpInfoLen]); err != nil {
			return nil, false, fmt.Errorf("tlmlx5: Connect: rank %d: %w", r, err)
		}
	}
	return infos, allDM, nil
}

func (t *team) Connect(addrs [][]byte) error {
	if len(addrs) != t.size {
		return fmt.Errorf("tlmlx5: Connect: %d addresses for %d ranks: %w", len(addrs), t.size, driver.ErrInvalid)
	}
	infos, allDM, err := parseAddrs(addrs, t.rank)
	if err != nil {
		return err
	}
	if t.size == 1 {
		return nil
	}
	// The receive slots are placed now that the team's kind is known; nothing can
	// arrive before: a peer sends only once coll's second round says every rank
	// connected.
	if err := t.cb.agree(t.c, allDM); err != nil {
		return fmt.Errorf("tlmlx5: Connect: control block: %w", err)
	}
	for r, pe := range t.peers {
		if pe == nil {
			continue
		}
		for s := 0; s < t.slots; s++ {
			pe.recvs[s] = verbs.RecvWR{ID: uint64(recvID(r, s)),
				SGE: []verbs.SGE{{Addr: t.cb.base + uint64(t.recvSlot(r, s)), Length: slotSize, LKey: t.cb.mr.LKey()}}}
		}
		if err := pe.qp.PostRecv(pe.recvs...); err != nil {
			return fmt.Errorf("tlmlx5: QP to rank %d: %w", r, err)
		}
		if err := pe.qp.Connect(infos[r]); err != nil {
			return fmt.Errorf("tlmlx5: Connect to rank %d: %w", r, err)
		}
		if err := t.eagerUp(pe); err != nil {
			return err
		}
	}
	return nil
}

// ctlKind says where this rank's control block lives after Connect: "dm" (NIC
// device memory) or "host"; every rank of a team says the same.
func (t *team) ctlKind() string { return t.cb.kind() }

func (t *team) MaxCtl() int { return slotSize - 1 }

// Register registers a staging scratch buffer of coll's. A DM scratch of the
// context's pool is registered already, through the pool's MR.
func (t *team) Register(b *mem.Buffer) (io.Closer, error) {
	if b != nil && b.Type() == mem.DM && t.c.handles(mem.DM) {
		if _, err := t.c.dmChunk("the scratch", b); err != nil {
			return nil, err
		}
		return nopCloser{}, nil
	}
	if b == nil || !t.c.handles(b.Type()) {
		return nil, fmt.Errorf("tlmlx5: register: this transport registers what its reach lists (%v): %w", t.c.reach, driver.ErrNotSupported)
	}
	e, err := t.cache.acquire(nil, b, 0, 0, receiveAccess, nil)
	if err != nil {
		return nil, err
	}
	e.scratch = true
	return &scratchReg{t: t, e: e}, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

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
	for _, pe := range t.peers {
		if pe != nil && pe.eager != nil {
			if err := pe.eager.close(); err != nil {
				errs = append(errs, err)
			} else {
				pe.eager = nil
			}
		}
	}
	if err := t.dropCached(); err != nil {
		errs = append(errs, err)
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
		return fmt.Errorf("tlmlx5: %d task(s) open: %w", len(t.tasks), driver.ErrBusy)
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
