package tlmlx5

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// Wire-up. A team's endpoint holds one RC QP per peer it talks to, each with its own
// receive slots (the control block, ctlblock.go) and send slots. Given a Messenger
// (coll's mailbox), the endpoint is lazy: its address is one byte (the mode),
// NewEndpoint and Connect
// create no QP, and a peer's QP is made when this rank first sends to it or hears
// from it, through the handshake of connect.go. Without a Messenger it connects to
// every peer at Connect (a full mesh): its address then holds a QP's info for every
// peer.

// team is one rank's endpoint of a team.
type team struct {
	c         *context
	p         driver.TeamParams
	rank      int
	size      int
	slots     int
	msgr      driver.Messenger // nil: the full mesh at Connect
	connected bool             // Connect ran: peers may be linked

	cqMu   sync.Mutex // guards cqs against WaitEvent, which runs without the team lock
	cqs    []*verbs.CQ
	cqUsed int     // peers on the last CQ
	peers  []*peer // by rank; nil until linked (nil at this rank)
	linked []*peer // the peers made, in order
	cache  *regCache
	wcs    []verbs.WC
	rbuf   [slotSize]byte
	// credits is decoding room for a credit message (eager.go).
	credits   [maxCredits]uint16
	tasks     map[uint64]*task
	bySeq     map[uint16]*task // routing of data writes by their immediate (seqKey)
	byID      map[uint32]*task // routing of data completions by their wrID
	nextID    uint32
	stash     map[uint64][]rtr // ready-to-receives of tasks not created yet
	stashFree [][]rtr          // emptied stash lists, for their backing arrays (unstash)
	// srcWait: tasks with operations waiting for their staged source (srcwait.go).
	srcWait map[*task]struct{}
	// piecesPending: some task of srcWait has a local copy in pieces to continue
	// (pieces.go); atomic, for WaitEvent.
	piecesPending atomic.Bool
	// The eager path (eager.go): its sizes, and the headers kept for receives that
	// have not started (at most maxEarly).
	eagerMax, eagerSlots int
	// eagerSent counts eager messages sent as one write with their header: from a
	// copy [0] (outbox), from the source [1]; and as writes and then a header in a
	// control slot [2].
	eagerSent [3]uint64
	early     []eagerHdr
	maxEarly  int
	cached    []*task // closed tasks kept for reuse, oldest first (taskcache.go)
	// unreleased are tasks out of the cache whose release failed part-way: what they
	// still hold is released again when a registration they hold closes, and at
	// teardown (taskcache.go).
	unreleased []*task
	// quarantine: buffers of closed tasks that a peer may still write into
	// (quarantine.go).
	quarantine []*quarantined
	// completions counts the completions Poll took (Completions).
	completions uint64
	// pollRepeats counts the Polls' extra rounds of local copy pieces (pollPieces).
	pollRepeats uint64
	broken      error
	closed      bool
	// ev: the device's asynchronous events as this team has read them (events.go)
	ev eventState
	// lp: the loopback QP of local copies out of device memory (loopback.go), made
	// at the first such copy
	lp *loopLink
}

type peer struct {
	rank    int
	qp      *verbs.QP
	cb      hostRegion // receive slots (the control block): slots × slotSize
	sb      hostRegion // send slots of control messages: slots × slotSize
	down    bool
	posted  int // work requests in the send queue
	queue   sendRing
	ctlFree []int32
	ctlSGE  [][]verbs.SGE
	ctlOp   []ctlOp // per send slot: the eager write that holds it (eager.go), if any
	batch   []verbs.SendWR
	recvs   []verbs.RecvWR // one per slot, ready to post
	repost  []verbs.RecvWR
	link    linkState  // connect.go
	evFloor uint64     // the newest device event when the QP was made (events.go)
	eager   *eagerPeer // eager.go: made when the link is up (peerReady)
}

// Address modes: the first byte of an endpoint's address.
const (
	addrMesh = 1 // every peer's QP info follows
	addrLazy = 2 // nothing per peer: QPs are made on first use
)

func newTeam(c *context, p driver.TeamParams) (_ *team, _ []byte, err error) {
	n := p.Size
	t := &team{c: c, p: p, rank: p.Rank, size: n, slots: slotsFor(n), peers: make([]*peer, n), msgr: p.Messenger,
		wcs: make([]verbs.WC, wcBatch), tasks: map[uint64]*task{}, bySeq: map[uint16]*task{},
		byID: map[uint32]*task{}, stash: map[uint64][]rtr{}, srcWait: map[*task]struct{}{}}
	t.cache = newRegCache(c.pd)
	t.startEvents()
	if n > 1 {
		t.eagerMax, t.eagerSlots = eagerMaxFor(n), eagerSlotsFor(n)
		t.maxEarly = (n-1)*t.eagerSlots + maxEarlyHeaders
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.teardown())
		}
	}()
	if t.ev.fatal != nil {
		return nil, nil, fmt.Errorf("tlmlx5: %w", t.ev.fatal) // the device is gone (events.go)
	}
	// The first CQ now, not at the first link: a waiter waits on it from the start
	// (WaitEvent), so that a completion that comes before any link (a copy through
	// the loopback QP, on a team of one rank) wakes it.
	if _, err = t.cqFor(); err != nil {
		return nil, nil, err
	}
	if t.msgr != nil || n == 1 {
		return t, []byte{addrLazy}, nil
	}
	addr := make([]byte, 1+n*qpInfoLen)
	addr[0] = addrMesh
	for r := 0; r < n; r++ {
		if r == t.rank {
			continue
		}
		pe, err := t.newPeer(r)
		if err != nil {
			return nil, nil, err
		}
		info, err := pe.qp.Info().MarshalBinary()
		if err != nil {
			return nil, nil, err
		}
		copy(addr[1+r*qpInfoLen:], info)
	}
	return t, addr, nil
}

var qpInfoLen = func() int { b, _ := verbs.QPInfo{}.MarshalBinary(); return len(b) }()

// newPeer makes the peer struct and QP for rank r; its memory comes with attach.
// The QP's completions go to a CQ of the team that has room (cqGroup peers each).
func (t *team) newPeer(r int) (*peer, error) {
	pe := &peer{rank: r, batch: make([]verbs.SendWR, 0, sqDepth), recvs: make([]verbs.RecvWR, t.slots),
		repost: make([]verbs.RecvWR, 0, t.slots), ctlSGE: make([][]verbs.SGE, t.slots), ctlOp: make([]ctlOp, t.slots)}
	pe.queue.init(4)
	t.peers[r] = pe
	t.linked = append(t.linked, pe)
	cq, err := t.cqFor()
	if err != nil {
		return pe, err
	}
	pe.qp, err = t.c.pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: sqDepth,
		MaxRecvWR: t.slots, MaxSGE: maxSGE})
	if err != nil {
		return pe, fmt.Errorf("tlmlx5: QP to rank %d: %w", r, err)
	}
	t.cqUsed++
	// Events of this QP are numbered after the floor (peer.ofQP); a failed read leaves
	// it 0, and the next read says why.
	pe.evFloor, _ = t.c.dev.LatestEvent()
	return pe, nil
}

// cqFor returns the CQ the next peer's QP uses: a team's CQs hold the completions of
// cqGroup peers each (sqDepth sends and slots receives per peer), and a new one is
// made when the last is taken, so that a team's completion memory grows with the
// peers it links, not with its size.
func (t *team) cqFor() (*verbs.CQ, error) {
	if len(t.cqs) > 0 && t.cqUsed < cqGroup {
		return t.cqs[len(t.cqs)-1], nil
	}
	peers := min(cqGroup, t.size-1)
	cq, err := t.c.dev.CreateCQ(peers*(sqDepth+t.slots) + loopDepth + 16) // the loopback's room
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: %w", err)
	}
	t.cqMu.Lock()
	t.cqs = append(t.cqs, cq)
	t.cqMu.Unlock()
	t.cqUsed = 0
	return cq, nil
}

// attach gives peer pe its control block and send slots and posts its receives:
// from then on pe's messages can land here.
func (t *team) attach(pe *peer) error {
	var err error
	if pe.cb, err = newCtlBlock(t.c, t.slots*slotSize); err != nil {
		return err
	}
	if pe.sb, err = newHostRegion(t.c.pd, t.slots*slotSize, verbs.AccessLocalWrite); err != nil {
		return err
	}
	for s := t.slots - 1; s >= 0; s-- {
		pe.ctlFree = append(pe.ctlFree, int32(s))
		pe.ctlSGE[s] = []verbs.SGE{{Addr: pe.sb.addr(s * slotSize), LKey: pe.sb.mr.LKey()}}
	}
	for s := 0; s < t.slots; s++ {
		pe.recvs[s] = verbs.RecvWR{ID: uint64(recvID(pe.rank, s)),
			SGE: []verbs.SGE{{Addr: pe.cb.addr(s * slotSize), Length: slotSize, LKey: pe.cb.mr.LKey()}}}
	}
	if err := pe.qp.PostRecv(pe.recvs...); err != nil {
		return fmt.Errorf("tlmlx5: QP to rank %d: %w", pe.rank, err)
	}
	return t.eagerUp(pe) // before pe's first message can come: its eager headers too
}

// parseAddrs reads the team's addresses, which other processes sent (see newTeam).
// It returns the QP info each peer made for rank me (mesh addresses only).
func parseAddrs(addrs [][]byte, me int) ([]verbs.QPInfo, error) {
	n := len(addrs)
	if me < 0 || me >= n {
		return nil, fmt.Errorf("tlmlx5: Connect: rank %d of %d addresses: %w", me, n, driver.ErrInvalid)
	}
	mode := addrs[me]
	if len(mode) == 0 || (mode[0] != addrLazy && mode[0] != addrMesh) {
		return nil, fmt.Errorf("tlmlx5: Connect: this rank's own address is malformed: %w", driver.ErrInvalid)
	}
	want := 1
	var infos []verbs.QPInfo
	if mode[0] == addrMesh {
		want = 1 + n*qpInfoLen
		infos = make([]verbs.QPInfo, n)
	}
	for r, a := range addrs {
		if len(a) != want || a[0] != mode[0] {
			return nil, fmt.Errorf("tlmlx5: Connect: rank %d's address is %d bytes of mode %d, want %d of mode %d (every rank's OOB must carry messages, or none's): %w",
				r, len(a), a0(a), want, mode[0], driver.ErrInvalid)
		}
		if r == me || infos == nil {
			continue
		}
		if err := infos[r].UnmarshalBinary(a[1+me*qpInfoLen : 1+(me+1)*qpInfoLen]); err != nil {
			return nil, fmt.Errorf("tlmlx5: Connect: rank %d: %w", r, err)
		}
	}
	return infos, nil
}

func a0(a []byte) int {
	if len(a) == 0 {
		return -1
	}
	return int(a[0])
}

func (t *team) Connect(addrs [][]byte) error {
	if len(addrs) != t.size {
		return fmt.Errorf("tlmlx5: Connect: %d addresses for %d ranks: %w", len(addrs), t.size, driver.ErrInvalid)
	}
	infos, err := parseAddrs(addrs, t.rank)
	if err != nil {
		return err
	}
	t.connected = true
	if t.size == 1 || infos == nil {
		return nil
	}
	// The full mesh. Nothing can arrive before the receives are posted: a peer sends
	// only once coll's second round says every rank connected.
	for _, pe := range t.linked {
		if err := t.attach(pe); err != nil {
			return fmt.Errorf("tlmlx5: Connect: %w", err)
		}
		if err := pe.qp.Connect(infos[pe.rank]); err != nil {
			return fmt.Errorf("tlmlx5: Connect to rank %d: %w", pe.rank, err)
		}
		pe.link = linkState{state: linkReady, sentReady: true}
		t.peerReady(pe)
	}
	return nil
}

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
	if err := t.closeLoop(); err != nil {
		errs = append(errs, err)
	}
	for _, pe := range t.linked {
		if pe.qp != nil {
			if err := pe.qp.Close(); err != nil {
				errs = append(errs, err)
				continue
			}
			pe.qp = nil
		}
		if err := pe.sb.close(); err != nil {
			errs = append(errs, err)
		}
		if err := pe.cb.close(); err != nil {
			errs = append(errs, err)
		}
		if pe.eager != nil {
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
	if len(errs) == 0 { // every queue pair is gone: nothing can write into what it kept
		if err := t.dropQuarantine(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := t.cache.close(); err != nil {
		errs = append(errs, err)
	}
	t.cqMu.Lock()
	defer t.cqMu.Unlock()
	for i, cq := range t.cqs {
		if cq == nil {
			continue
		}
		if err := cq.Close(); err != nil {
			errs = append(errs, err)
		} else {
			t.cqs[i] = nil
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
	t.tellClosed()
	if err := t.teardown(); err != nil {
		return fmt.Errorf("tlmlx5: team close: %w", err)
	}
	t.closed = true
	t.c.mu.Lock()
	t.c.teams--
	t.c.mu.Unlock()
	return nil
}

// Links says how many peers this endpoint made a QP for (driver.LinkCounter).
func (t *team) Links() int {
	n := 0
	for _, pe := range t.linked {
		if pe.qp != nil {
			n++
		}
	}
	return n
}
