package coll

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
)

// Team is one rank's member of a team of ranks. It is safe for concurrent use, but
// collectives must be initialized in the same order on every rank: Init calls are
// serialized, and the k-th Init of every rank is collective number k of the team.
type Team struct {
	c     *Context
	cfg   *Config
	rank  int
	size  int
	tl    driver.Endpoint
	reach mem.Reach
	// scratch keeps staging buffers between requests.
	scratch   scratchCache
	kits      []*stageKit // idle, for the next Inits (stagekit.go)
	stageOpts []asym.Option
	fs        *fault.Set
	// spinFree is how long a waiter polls on free cores before it sleeps
	// (spinFreeFor: longer where every process of the node has a core).
	spinFree time.Duration

	mu      sync.Mutex
	nextSeq atomic.Uint64
	reqs    map[uint64]*Request
	// live is reqs in the order of Init: progressLocked's pass over them, every poll,
	// was a map iteration's start (60 ns of a 0.6 µs collective).
	live []*Request
	// dropped: requests of failed Inits whose release failed too (init.go); Close
	// releases them before the transport goes
	dropped []*Request
	// stuck: requests of failed InitIntos whose release failed too: they stay the
	// caller's, open, and Close refuses while any is (its Close retries the release)
	stuck   []*Request
	pending map[uint64]*pendingSeq
	// pendFree: emptied pendingSeqs for newPending, at most maxPendFree
	pendFree []*pendingSeq
	// left maps a rank that closed its team to the first collective it
	// never takes part in.
	left    map[int]uint64
	leftWhy map[int]string
	// dead lists the ranks whose process the PeerWatcher said died, in that order.
	dead   []int
	broken error
	// brokenFrom is the first collective this rank did not do its part of when it
	// broke: a peer it never linked to learns it only as it closes.
	brokenFrom uint64
	flooded    bool // the team-broken message went out
	closed     bool
	msg        []byte // scratch for outgoing control messages
	// spare is a request of Run that closed cleanly, kept for the next Init: Run's
	// request never reaches the caller, so it may be reused (recycle).
	spare *Request
	// sigE is the signature check's memory of the overlay edges and of this rank's
	// own signatures (sigedge.go).
	sigE sigEdges
	// lastSig is the last signature text made (sigCauseFor), and what it describes.
	lastSig struct {
		key   sigKey
		cause string
	}
	// sentKinds counts the control messages this rank sent, by kind (tests read it).
	sentKinds [numCtlKinds]atomic.Uint64
	// lastPre is the last signature without algorithm made (preSig).
	lastPre struct {
		key sigKey
		sig uint32
		set bool
	}
	// lastTree is the agreement tree of the last agreed request (agreeTree): its
	// children slice is shared, read-only, by every request rooted there.
	lastTree struct {
		root, parent int
		children     []int
		set          bool
	}

	// The waiter role: one goroutine at a time blocks in the transport's WaitEvent; others
	// wait for it on changed, which is made only when someone waits behind it.
	waiting bool
	changed chan struct{}
	dctx    *deadlineCtx
	// kicks counts kickWaiter calls; stopWait ends the waiter's transport wait.
	kicks    uint64
	stopWait func()
	kickDctx func() // kicks the current dctx, made once: a closure allocates
	// stopWatch ends the OOB's watch for dead processes (PeerWatcher), if any;
	// creating cancels NewTeam while it runs.
	stopWatch func()
	// drainStop ends the goroutine that delivers a backlog no call polls for
	// (drainLater); drainDone is closed when it ended. Both nil when none runs.
	drainStop, drainDone chan struct{}
	// keepStop ends the goroutine that polls a team no call polls (keeper); keepDone
	// is closed when it ended. calls counts the polls of the caller's calls (the keeper's
	// idleness: none since its last tick).
	keepStop, keepDone chan struct{}
	keeperPolls        uint64 // the keeper's polls of the team, for its tests
	calls              uint64
	// background: the keeper or the drainer polls now, not a call of the caller's:
	// such polls apply no deadline and do not count as the caller's.
	background bool
	creating   context.CancelCauseFunc
	// ovl is the overlay tree that aborts flood over and signatures climb
	// (control.go), made at first use.
	ovl *overlay
	// relayed maps a collective this rank no longer holds to the earliest post
	// whose abort it passed on (route), so that it does so once.
	relayed map[uint64]uint32
	// mailbox is the team's message channel (Messenger) where the OOB has one: the
	// transport then connects to a peer on first use (lazy is its Lazy side).
	mailbox Mailbox
	lazy    driver.Lazy
	local   driver.LocalWorker // the transport's, where it has one
	// floodMsg is the team-broken message this rank flooded, sent again to a peer
	// that links up later (a lazy transport floods only the peers it is linked to).
	floodMsg []byte
	leftMsg  []byte // the left message this rank sent as it closed, likewise
	// mailboxGone: peers whose mailbox refused a message because their team closed
	// (teamMessenger); progressLocked records them as left.
	mailboxGone []goneNews
	// inbox holds what the mailbox delivered until the team lock is taken (deliver).
	inboxMu sync.Mutex
	inbox   []boxMsgIn
	inboxN  atomic.Int32
	// delivering: a goroutine waits for the team lock to hand over the inbox.
	delivering atomic.Bool
}

// goneNews is news that a peer's team closed: from which collective on it takes part
// in nothing, where exact (its transport said), else unknown (from 0).
type goneNews struct {
	rank  int
	from  uint64
	exact bool
	cause string
}

type boxMsgIn struct {
	from int
	msg  []byte
}

// teamMessenger is the transport's Messenger: the team's mailbox, which also
// learns that a peer's team closed when its mailbox refuses a message. The transport
// calls Send under the team lock, in the middle of its own work, so the news waits
// in mailboxGone for progressLocked.
type teamMessenger struct{ t *Team }

func (m teamMessenger) Send(peer int, msg []byte) error {
	return m.gone(peer, m.t.mailbox.Send(peer, msg))
}

func (m teamMessenger) Gone(peer int) error { return m.gone(peer, m.t.mailbox.Gone(peer)) }

func (m teamMessenger) Left(peer int, from uint64, why string) {
	m.t.mailboxGone = append(m.t.mailboxGone, goneNews{rank: peer, from: from, exact: true, cause: why})
}

func (m teamMessenger) gone(peer int, err error) error {
	var le *LeftError
	if errors.As(err, &le) && le.Rank == peer {
		// The closing rank gave its mailbox its bound: it did its part of everything
		// before, which must not fail here for it.
		m.t.mailboxGone = append(m.t.mailboxGone, goneNews{rank: peer, from: le.From, exact: true, cause: le.Why})
		return err
	}
	if errors.Is(err, ErrClosed) {
		m.t.mailboxGone = append(m.t.mailboxGone, goneNews{rank: peer, cause: err.Error()})
	}
	return err
}

// pendingSeq holds control messages of a collective this rank has not initialized yet.
type pendingSeq struct {
	msgs       []pendingMsg
	flooded    uint32 // the post whose failure the stash flooded (0: none)
	floodedAll bool   // and it went to every rank (a mismatch's)
}

type pendingMsg struct {
	peer int
	msg  []byte
}

// keep appends a copy of raw from peer, reusing a buffer that an earlier use of ps left.
func (ps *pendingSeq) keep(peer int, raw []byte) {
	n := len(ps.msgs)
	if n < cap(ps.msgs) {
		ps.msgs = ps.msgs[:n+1]
		ps.msgs[n] = pendingMsg{peer, append(ps.msgs[n].msg[:0], raw...)}
		return
	}
	ps.msgs = append(ps.msgs, pendingMsg{peer, append([]byte(nil), raw...)})
}

// newPending is an empty pendingSeq, one that takePending recycled if there is one: a
// neighbour's declaration or abort often arrives before this rank's Init (the
// signature check declares at Init), and a repeated non-persistent shape allocates
// nothing.
func (t *Team) newPending() *pendingSeq {
	if n := len(t.pendFree); n > 0 {
		ps := t.pendFree[n-1]
		t.pendFree = t.pendFree[:n-1]
		return ps
	}
	return &pendingSeq{}
}

// takePending removes the messages kept for collective k and returns them (nil if
// none); recyclePending takes them back once they were handled.
func (t *Team) takePending(k uint64) *pendingSeq {
	ps := t.pending[k]
	delete(t.pending, k)
	return ps
}

func (t *Team) recyclePending(ps *pendingSeq) {
	if ps == nil || len(t.pendFree) >= maxPendFree {
		return
	}
	ps.msgs, ps.flooded, ps.floodedAll = ps.msgs[:0], 0, false
	t.pendFree = append(t.pendFree, ps)
}

// MaxTeamSize is the most ranks a team may have. Every rank keeps a few words per
// rank of the team (its address table, its peers), so an OOB that reports a size
// beyond any machine's must not make NewTeam allocate by it; and no algorithm runs on
// more than 32767 ranks but those whose messages per rank grow as log n (tlmlx5's
// tags, see tlmlx5.Fits).
const MaxTeamSize = 1 << 20

// NewTeam creates this rank's member of the team that oob connects. It is collective:
// every rank of oob calls it, and it fails on every rank if it fails on any, with one
// exception the OOB makes: when the OOB fails on one rank only in the last round, after
// the others completed it, that rank's NewTeam fails and the others' team is born with
// it gone, so that their first collective fails at once with a PeerError naming it.
// ctx bounds it; without a deadline, Config.Timeout does. Over an OOB that is a
// PeerWatcher, a process that dies fails it on the others at once.
func (c *Context) NewTeam(ctx context.Context, oob OOB) (*Team, error) {
	const op = "NewTeam"
	switch {
	case c == nil:
		return nil, invalid(op, "nil Context")
	case ctx == nil:
		return nil, invalid(op, "nil context.Context")
	case !c.made:
		return nil, invalid(op, "a zero Context: only NewContext makes a usable one")
	case oob == nil:
		return nil, invalid(op, "nil OOB")
	}
	rank, size := oob.Rank(), oob.Size()
	if size < 1 || rank < 0 || rank >= size {
		return nil, invalid(op, "OOB says rank %d of %d", rank, size)
	}
	if size > MaxTeamSize {
		return nil, invalid(op, "OOB says the team has %d ranks, more than MaxTeamSize (%d)", size, MaxTeamSize)
	}
	if _, ok := ctx.Deadline(); !ok && c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("coll: NewTeam: context: %w", ErrClosed)
	}
	c.teams++
	c.mu.Unlock()
	t, err := c.newTeam(ctx, oob, rank, size)
	if err != nil {
		c.mu.Lock()
		c.teams--
		c.mu.Unlock()
		return nil, err
	}
	return t, nil
}

func (c *Context) newTeam(ctx context.Context, oob OOB, rank, size int) (*Team, error) {
	t := &Team{
		c: c, cfg: &c.cfg, rank: rank, size: size,
		fs:      fault.NewSet(c.cfg.Faults, rank),
		reqs:    map[uint64]*Request{},
		pending: map[uint64]*pendingSeq{},
		left:    map[int]uint64{},
		leftWhy: map[int]string{},
		dctx:    newDeadlineCtx(),
	}
	t.spinFree = spinFreeFor(t.cfg)
	t.kickDctx = func() { t.dctx.kick() } // under t.mu: waitEvent swaps dctx before it publishes stopWait
	t.scratch.idle = map[scratchKey][]*mem.Buffer{}
	t.scratch.limit = c.cfg.ScratchCache
	// Made once: each option is a closure, and Init runs for every non-persistent
	// collective (BenchmarkRepeatedInitAllocs).
	t.stageOpts = []asym.Option{asym.WithAlloc(t.scratch.alloc), asym.WithFree(t.scratch.free),
		asym.WithStreams(t.scratch.stream, t.scratch.putStream), asym.WithFaults(t.fs)}

	// Round 1: every rank's address, or the reason it has none. Every rank takes part
	// in both rounds whatever happens, so that a local failure never leaves the
	// others waiting in the OOB.
	tc := c.tls[0]
	t.reach = tc.Reach()
	t.scratch.dm, _ = tc.(driver.DMAllocator)
	var addr []byte
	localErr := t.fs.Hit(fault.Team)
	if localErr == nil {
		params := driver.TeamParams{Rank: rank, Size: size, Faults: t.fs, NextSeq: t.nextSeq.Load, Leaving: t.leaving, Algs: c.cfg.Algs}
		if m, ok := oob.(Messenger); ok && size > 1 {
			if t.mailbox, localErr = m.Mailbox(); localErr == nil && t.mailbox == nil {
				localErr = errors.New("the OOB's Mailbox returned neither a mailbox nor an error")
			}
			if localErr == nil {
				params.Messenger = teamMessenger{t}
			}
		}
		if localErr == nil {
			t.tl, addr, localErr = tc.NewEndpoint(params)
		}
		if lz, ok := t.tl.(driver.Lazy); ok && params.Messenger != nil {
			t.lazy = lz
		}
		t.local, _ = t.tl.(driver.LocalWorker)
	}
	if localErr == nil {
		t.msg = make([]byte, t.tl.MaxCtl())
		if len(t.msg) < ctlHeader+16 {
			localErr = fmt.Errorf("the transport's control messages are too small (%d bytes)", len(t.msg))
		}
	}
	round1 := append([]byte{0}, addr...)
	if localErr != nil {
		round1 = append([]byte{1}, localErr.Error()...)
	}
	// A dead process is noticed during setup too: its death cancels ctx with a
	// *PeerError as the cause, which the OOB's failure then carries.
	ctx, cancelSetup := context.WithCancelCause(ctx)
	defer cancelSetup(nil)
	t.creating = cancelSetup
	if pw, ok := oob.(PeerWatcher); ok {
		stop, err := pw.WatchPeers(ctx, t.peerDied)
		if err != nil {
			localErr = errors.Join(localErr, err)
		} else {
			t.stopWatch = stop
		}
	}
	died := func(err error) error {
		var pe *PeerError
		if c := context.Cause(ctx); errors.As(c, &pe) {
			return errors.Join(c, err)
		}
		return err
	}
	fail := func(err error) (*Team, error) {
		if t.stopWatch != nil {
			t.stopWatch()
		}
		if t.mailbox != nil {
			// Before the endpoint closes: nothing is delivered to it after this, and
			// a peer that connects later is refused with the reason.
			t.mailbox.Close(fmt.Sprintf("rank %d's NewTeam failed: %v", rank, err))
		}
		if t.tl != nil {
			err = errors.Join(err, t.tl.Close())
		}
		t.dctx.disarm()
		return nil, fmt.Errorf("coll: NewTeam rank %d of %d: %w", rank, size, err)
	}
	addrs, err := oob.Allgather(ctx, round1)
	if err != nil {
		return fail(died(errors.Join(localErr, err)))
	}
	var peerErr error
	for i, a := range addrs {
		if len(a) == 0 {
			peerErr = fmt.Errorf("rank %d sent an empty address", i)
		} else if a[0] != 0 && i != rank {
			peerErr = &PeerError{Rank: i, Cause: "team setup: " + string(a[1:])}
		}
		if len(a) > 0 {
			addrs[i] = a[1:]
		}
	}
	if localErr == nil && peerErr == nil {
		localErr = t.tl.Connect(addrs)
	}
	// Round 2: did every rank connect?
	ok := []byte{0}
	if localErr != nil || peerErr != nil {
		ok[0] = 1
	}
	oks, err := oob.Allgather(ctx, ok)
	if err != nil {
		if localErr == nil && peerErr == nil && t.mailbox != nil {
			// A lazy team has no links yet: peers that connect to this rank learn
			// it from its closed mailbox.
			t.mailbox.Close(fmt.Sprintf("rank %d's NewTeam failed in its last setup round (%v)", rank, err))
		}
		if localErr == nil && peerErr == nil {
			// The others may have finished the round and formed the team with this
			// rank in it. The links are up: tell them, so that their first
			// collective fails at once, naming this rank, instead of at its deadline.
			t.sendUp(ctlMsg{kind: ctlLeft, seq: 0, origin: uint32(rank),
				cause: fmt.Sprintf("rank %d's NewTeam failed in its last setup round (%v)", rank, err)})
			t.drainLocked()
		}
		return fail(died(errors.Join(localErr, peerErr, err)))
	}
	if localErr != nil {
		return fail(localErr)
	}
	if peerErr != nil {
		return fail(peerErr)
	}
	for i, o := range oks {
		if len(o) != 1 || o[0] != 0 {
			return fail(&PeerError{Rank: i, Cause: "team setup failed there (connect)"})
		}
	}
	t.mu.Lock()
	t.creating = nil
	t.mu.Unlock()
	if t.mailbox != nil {
		// Peers may already be connecting: what they sent waited in the mailbox.
		t.mailbox.Listen(t.deliver)
	}
	var pe *PeerError
	if c := context.Cause(ctx); errors.As(c, &pe) {
		return fail(c)
	}
	t.mu.Lock()
	t.startKeeper()
	t.mu.Unlock()
	return t, nil
}

// peerDied is the PeerWatcher's news that rank's process died. During NewTeam it
// cancels the setup; after, it fails every collective in flight with a *PeerError
// naming the rank, breaks the team, and wakes the goroutine waiting on the transport,
// which no event would wake.
func (t *Team) peerDied(rank int, cause string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pe := &PeerError{Rank: rank, Cause: cause, Broken: true}
	switch {
	case t.creating != nil:
		t.creating(pe)
		return
	case t.closed:
		return
	}
	if rank >= 0 && rank < t.size {
		t.dead = append(t.dead, rank)
		t.peerLeft(rank, 0, false, cause)
		// Nothing sent to a dead process completes but by the transport's own
		// timeouts, which rxe was seen never to reach (a send to the SIGKILLed rank
		// outstanding 35 s later, the abort of the collective waiting on it): fence
		// it now, so that what was posted to it flushes.
		if rank != t.rank {
			t.tl.CutOff(rank, cause)
		}
	}
	if !t.flooded {
		// The news goes on as the dead rank's: a peer that learns it this way
		// names the same rank and cause.
		t.flooded = true
		origin := rank
		if origin < 0 || origin >= t.size {
			origin = t.rank
		}
		t.sendUp(ctlMsg{kind: ctlBroken, origin: uint32(origin), cause: cause})
	}
	t.setBroken(pe)
	t.kickWaiter()
}

// sendUp sends m to every peer whose link is up, whatever the collective. A lazy
// transport's unlinked peers are left out: sending would connect to every peer.
// What they miss comes to them when they link up (deliver) or fail to (a closed
// team's mailbox refuses them).
func (t *Team) sendUp(m ctlMsg) {
	b := m.encode(t.msg)
	switch m.kind {
	case ctlBroken:
		t.floodMsg = append([]byte(nil), b...)
	case ctlLeft:
		t.leftMsg = append([]byte(nil), b...)
	}
	for p := 0; p < t.size; p++ {
		if p == t.rank || t.tl.PeerDown(p) || (t.lazy != nil && !t.lazy.Linked(p)) {
			continue
		}
		if _, left := t.left[p]; left && m.kind == ctlLeft {
			continue // it closed its team: nobody reads it
		}
		_ = t.tl.SendCtl(p, b)
	}
}

// deliver takes a message of the team's mailbox, from the mailbox's goroutine: it
// waits in the inbox (its own lock) and is handed to the transport under the team
// lock, by this goroutine or by whoever holds the lock meanwhile. The waiter is
// kicked: a link made may have work for Poll.
//
// The mailbox's goroutine never waits for the team lock: it delivers in order, and
// Close's drain holds the lock while a link that its last messages need is being
// made, so the peer's answer, queued behind a message blocked here, would never reach
// the inbox the drain reads (the soak saw every such close wait out closeDrain, and
// the peer then its deadline). When the lock is taken, one goroutine at a time waits
// for it, to kick the waiter once the holder lets go.
func (t *Team) deliver(from int, msg []byte) {
	t.inboxMu.Lock()
	t.inbox = append(t.inbox, boxMsgIn{from: from, msg: msg})
	t.inboxN.Add(1)
	t.inboxMu.Unlock()
	if t.mu.TryLock() {
		t.takeInbox()
		t.kickWaiter()
		t.mu.Unlock()
		return
	}
	if t.delivering.CompareAndSwap(false, true) {
		go func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			t.delivering.Store(false) // a message after this starts another
			t.takeInbox()
			t.kickWaiter()
		}()
	}
}

// takeInbox hands the transport what the mailbox delivered. A peer that links up
// after this rank flooded that the team is broken, or said that it closes, is told
// too.
func (t *Team) takeInbox() {
	if t.inboxN.Load() == 0 {
		return
	}
	t.inboxMu.Lock()
	in := t.inbox
	t.inbox = nil
	t.inboxN.Store(0)
	t.inboxMu.Unlock()
	if t.closed || t.lazy == nil {
		return
	}
	for _, m := range in {
		was := t.lazy.Linked(m.from)
		t.lazy.Message(m.from, m.msg)
		if was || !t.lazy.Linked(m.from) || t.tl.PeerDown(m.from) {
			continue
		}
		switch {
		case t.floodMsg != nil:
			_ = t.tl.SendCtl(m.from, t.floodMsg)
		case t.leftMsg != nil:
			// Linked while this rank closes (in its drain): it must learn that too.
			_ = t.tl.SendCtl(m.from, t.leftMsg)
		}
	}
}

// linking reports whether one of peers that is not quiet yet (it has not
// acknowledged the abort and is not gone) is still being connected to: the abort's
// grace does not cut off a peer whose link is still being made (the abort flood may
// link a failing rank to new peers), since the link fails by its own bound if the
// peer never answers.
func (t *Team) linking(peers []int, quiet func(int) bool) bool {
	if t.lazy == nil {
		return false
	}
	for _, p := range peers {
		if !quiet(p) && t.lazy.Linking(p) {
			return true
		}
	}
	return false
}

// Links is the number of peers this rank holds a transport connection to (an RC
// queue pair, for the mlx5 transport), or -1 where the transport does not say. Over
// an OOB that is a Messenger a connection is made when a collective first talks to a
// peer, so this counts the peers this rank's collectives have used; over another
// OOB every peer is connected at NewTeam.
func (t *Team) Links() int {
	if t.usable("Links") != nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0
	}
	if lc, ok := t.tl.(driver.LinkCounter); ok {
		return lc.Links()
	}
	return -1
}

// Rank is this member's rank (-1 for a nil Team).
func (t *Team) Rank() int {
	if t == nil {
		return -1
	}
	return t.rank
}

// Size is the number of ranks (0 for a nil Team).
func (t *Team) Size() int {
	if t == nil {
		return 0
	}
	return t.size
}

// usable refuses a nil Team, and a zero one, which no Context made: it has no
// transport, no numbering and no peers.
func (t *Team) usable(op string) error {
	switch {
	case t == nil:
		return invalid(op, "nil Team")
	case t.c == nil:
		return invalid(op, "a zero Team: only Context.NewTeam makes a usable one")
	}
	return nil
}

// Dead lists the ranks whose process this rank learned died (over an OOB that is a
// PeerWatcher, such as TCPOOB), in the order learned; nil while none did. A tool that
// would wait for every rank after a failure (to gather reports, say) need not wait for
// these.
func (t *Team) Dead() []int {
	if t.usable("Dead") != nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]int(nil), t.dead...)
}

// Broken returns nil while the team is usable, else an error wrapping ErrTeamBroken,
// or ErrClosed once this rank closed it (ErrInvalid for a nil or zero Team, which no
// Context made). A team that broke and was then closed reports the break.
func (t *Team) Broken() error {
	if err := t.usable("Broken"); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.broken == nil && t.closed {
		return fmt.Errorf("coll: Broken: team: %w", ErrClosed)
	}
	return t.broken
}

// Close releases the team's transport. It fails with ErrBusy while a request of the
// team is open. It tells the team's other ranks the first collective this rank will
// never join (they fail it and later ones at once: see the package doc), and waits at
// most 2 s for what this rank still owes its peers to leave; a mailbox that keeps a
// closed mark (TCPOOB's, in the store) may take up to 2 s more. Idempotent and
// nil-safe.
func (t *Team) Close() error {
	if t.usable("Close") != nil {
		return nil // nothing to release
	}
	var stopWatch func()
	var mailbox Mailbox
	var leaveFrom uint64 // what the mailbox's refusals will tell (LeavingCloser)
	var leaveWhy string
	var drainDone, keepDone chan struct{}
	defer func() {
		// After the unlock: the watch's, the mailbox's, the drainer's and the keeper's
		// goroutines may be taking t.mu.
		if drainDone != nil {
			<-drainDone
		}
		if keepDone != nil {
			<-keepDone
		}
		if stopWatch != nil {
			stopWatch()
		}
		if lc, ok := mailbox.(LeavingCloser); ok {
			lc.CloseLeaving(leaveFrom, leaveWhy)
		} else if mailbox != nil {
			mailbox.Close(leaveWhy)
		}
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	if n := len(t.reqs) + len(t.stuck); n > 0 {
		return fmt.Errorf("coll: Team.Close: %d request(s) still open: %w", n, ErrBusy)
	}
	if t.keepStop != nil {
		// Before the transport goes, whether or not its Close succeeds: the keeper
		// would poll a half-closed endpoint.
		close(t.keepStop)
		keepDone = t.keepDone
		t.keepStop, t.keepDone = nil, nil
	}
	// Tell the peers: collectives from nextSeq on will never see this
	// rank, and they fail them at once rather than at their deadline. What
	// arrived first is read: a peer that closed before is not sent it (on a real
	// NIC a send to a destroyed queue pair waits for its retries, which the drain
	// below would wait for).
	if t.broken == nil {
		t.takeInbox()
		if err := t.tl.Poll(handler{t}); err != nil {
			t.setBroken(err)
		}
	}
	if t.broken == nil {
		t.sendUp(ctlMsg{kind: ctlLeft, seq: t.nextSeq.Load(), origin: uint32(t.rank), cause: fmt.Sprintf("rank %d closed its team", t.rank)})
	}
	t.drainLocked()
	for len(t.dropped) > 0 {
		if err := t.dropped[0].release(); err != nil {
			return fmt.Errorf("coll: Team.Close: releasing what a failed Init built: %w", err)
		}
		t.dropped = t.dropped[1:]
	}
	if err := t.scratch.dropRegs(); err != nil {
		return fmt.Errorf("coll: Team.Close: deregistering staging buffers: %w", err)
	}
	if err := t.tl.Close(); err != nil {
		return fmt.Errorf("coll: Team.Close: %w", err)
	}
	if err := t.scratch.close(); err != nil {
		return fmt.Errorf("coll: Team.Close: freeing staging buffers: %w", err)
	}
	t.closed = true
	if t.drainStop != nil {
		close(t.drainStop)
		drainDone = t.drainDone
		t.drainStop, t.drainDone = nil, nil
	}
	stopWatch, t.stopWatch = t.stopWatch, nil
	mailbox, t.mailbox = t.mailbox, nil
	leaveFrom, leaveWhy = t.leaving()
	if leaveWhy == "" {
		leaveWhy = fmt.Sprintf("rank %d closed its team", t.rank)
	} else {
		leaveWhy = fmt.Sprintf("rank %d closed its broken team: %s", t.rank, leaveWhy)
	}
	t.dctx.disarm()
	t.c.mu.Lock()
	t.c.teams--
	t.c.mu.Unlock()
	return nil
}

// drainLocked polls until what this rank owes its peers has left: a collective that
// ended here may have its last message (the final agreement, say) queued behind a
// peer's receive credits, and closing the transport would drop it, failing on the peer
// a collective that succeeded here. A peer frees credits whenever it polls; one that
// does not within closeDrain (it has stopped calling the library) gets nothing more,
// and its own deadline ends what it waits for.
func (t *Team) drainLocked() {
	if t.broken != nil {
		// Its peers may be dead: what leaves while they poll leaves, without the
		// wait for a slow one.
		t.pushBacklog()
		return
	}
	deadline := time.Now().Add(closeDrain)
	cut := map[int]bool{}
	for t.tl.Unsent() > 0 && time.Now().Before(deadline) {
		t.takeInbox() // a link still being made completes meanwhile
		if err := t.tl.Poll(handler{t}); err != nil {
			return
		}
		// A peer that closed its team reads nothing more: what is still queued or
		// unacknowledged for it is owed to nobody. Over a real NIC its queue pair may
		// be gone already, and a send to it waits out RC's retries (about one
		// multi-process run in seven over rxe had a rank wait out closeDrain here).
		for p := range t.left {
			if !cut[p] {
				cut[p] = true
				t.tl.CutOff(p, fmt.Sprintf("rank %d closed its team", p))
			}
		}
		if t.tl.Unsent() == 0 {
			return
		}
		// The lock stays held: nothing else may start on a team being closed.
		time.Sleep(drainPoll)
	}
}

// setBroken marks the team broken (once), fails what is in flight, and tells the
// peers.
func (t *Team) setBroken(err error) {
	if t.broken != nil {
		return
	}
	t.broken = &brokenError{err}
	t.brokenFrom = t.nextSeq.Load()
	for seq, r := range t.reqs {
		if seq < t.brokenFrom && !r.awaitsDecision() && r.state != sDone {
			t.brokenFrom = seq
		}
	}
	if !t.flooded {
		t.flooded = true
		// A failed link goes out as its peer's failure: that rank is the one lost (a
		// process killed at once shows first as a queue pair in error on the ranks
		// writing to it, before the store's news of its death), and the others' errors
		// then name it.
		origin, cause := t.rank, err.Error()
		var le *driver.LinkError
		if errors.As(err, &le) && le.Peer >= 0 && le.Peer < t.size && le.Peer != t.rank {
			origin, cause = le.Peer, fmt.Sprintf("rank %d's %v", t.rank, le)
		}
		t.sendUp(ctlMsg{kind: ctlBroken, origin: uint32(origin), cause: cause})
	}
	for _, r := range t.reqs {
		if !r.awaitsDecision() { // its outcome is the root's, still on its way down
			r.fail(t.broken)
		}
	}
}

// leaving is what a closing transport tells a peer it has no link to yet
// (driver.TeamParams.Leaving).
func (t *Team) leaving() (uint64, string) {
	if t.broken == nil {
		return t.nextSeq.Load(), ""
	}
	return t.brokenFrom, t.broken.Error()
}

// gone reports whether nothing of collective seq can come from peer any
// more: its queue pair is down, or it closed its team before seq.
func (t *Team) gone(peer int, seq uint64) bool {
	if from, ok := t.left[peer]; ok && seq >= from {
		return true
	}
	return t.tl.PeerDown(peer)
}

// peerLeft records that peer closed its team and will never take part in
// collective from or later: those already running fail now, those not yet
// posted fail at their next post.
//
// News without the collective (from 0: the peer's mailbox refused a message, its
// process died) does not move back a bound its own left message set: a rank that
// closed after its part of collective s sends left from s+1 before its queue pairs go,
// and a send that then fails on one of them must not fail s here, which may have all
// it needs of it (the soak's eager-close runs saw exactly that: a ring allgather whose
// sender closed at once failed on the receiver, which had its data). Nor does it fail
// a post that reported done in the completion agreement (below); exact news (the
// peer's own left message, its transport's) does: the peer never voted on it.
func (t *Team) peerLeft(peer int, from uint64, exact bool, cause string) {
	if old, ok := t.left[peer]; ok && (old <= from || from == 0) {
		return
	}
	t.left[peer] = from
	t.leftWhy[peer] = cause
	for seq, r := range t.reqs {
		if seq < from {
			continue
		}
		pe := &PeerError{Rank: peer, Seq: seq, Post: r.post, Cause: cause}
		switch {
		case r.state == sInit || r.state == sDone:
			next := *pe
			next.Post = r.post + 1
			if r.abort.future == nil || next.Post < r.abort.future.Post {
				r.abort.future = &next
			}
		case !exact && r.state == sAgree && r.agree.sentDone:
			// This rank reported the post done: its outcome is the root's decision,
			// which the root may have made already with the peer's vote (the peer
			// then closed after its success). News of the peer without a bound (its
			// mailbox refused a hello) failed such a post here while the others
			// succeeded: the hour soak's one split outcome. The decision still comes
			// down the tree, and a parent that is gone ends the wait as undecided
			// (vote).
		default:
			r.fail(pe)
		}
	}
}

// leftBefore returns a PeerError for collective seq if a peer closed its
// team before it, or nil.
func (t *Team) leftBefore(seq uint64) *PeerError {
	for p, from := range t.left {
		if seq >= from {
			return &PeerError{Rank: p, Seq: seq, Post: 1, Cause: t.leftWhy[p]}
		}
	}
	return nil
}
