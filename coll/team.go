package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibcoll/ibcoll/asym"
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
	tl    TLTeam
	reach asym.Reach
	// scratch keeps staging buffers between requests.
	scratch scratchCache
	fs      *faultSet
	afs     *asym.Faults

	mu      sync.Mutex
	nextSeq atomic.Uint64
	reqs    map[uint64]*Request
	pending map[uint64]*pendingSeq
	// left maps a rank that closed its team to the first collective it
	// never takes part in.
	left    map[int]uint64
	broken  error
	flooded bool // the team-broken message went out
	closed  bool
	msg     []byte // scratch for outgoing control messages

	// The waiter role: one goroutine at a time blocks in the TL's WaitEvent; others
	// wait for it on changed, which is made only when someone waits behind it.
	waiting bool
	changed chan struct{}
	dctx    *deadlineCtx
}

// pendingSeq holds control messages of a collective this rank has not initialized yet.
type pendingSeq struct {
	msgs    []pendingMsg
	flooded uint32
}

type pendingMsg struct {
	peer int
	msg  []byte
}

// Control messages of coll: kind, flags, then little-endian fields.
const (
	ctlAbort  = 1
	ctlDone   = 2
	ctlFin    = 3
	ctlBroken = 4
	ctlLeft   = 5 // seq: the first collective the sender will never take part in

	flagBroken = 1
	flagAck    = 2

	ctlHeader = 24 // kind, flags, 2 pad, seq 8, post 4, origin 4, sig 4
)

// NewTeam creates this rank's member of the team that oob connects. It is collective:
// every rank of oob calls it, and it fails on every rank if it fails on any. ctx bounds
// it; without a deadline, Config.Timeout does.
func (c *Context) NewTeam(ctx context.Context, oob OOB) (*Team, error) {
	const op = "NewTeam"
	switch {
	case c == nil:
		return nil, invalid(op, "nil Context")
	case ctx == nil:
		return nil, invalid(op, "nil context.Context")
	case oob == nil:
		return nil, invalid(op, "nil OOB")
	}
	rank, size := oob.Rank(), oob.Size()
	if size < 1 || rank < 0 || rank >= size {
		return nil, invalid(op, "OOB says rank %d of %d", rank, size)
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
		fs:      newFaultSet(c.cfg.Faults, rank),
		reqs:    map[uint64]*Request{},
		pending: map[uint64]*pendingSeq{},
		left:    map[int]uint64{},
		dctx:    newDeadlineCtx(),
	}
	t.afs = &asym.Faults{}
	t.scratch.idle = map[scratchKey][]*mem.Buffer{}
	t.scratch.limit = c.cfg.ScratchCache
	t.afs.At[asym.FaultCopyIn] = t.fs.copyAt(FaultCopyIn)
	t.afs.At[asym.FaultCopyOut] = t.fs.copyAt(FaultCopyOut)

	// Round 1: every rank's address, or the reason it has none. Every rank takes part
	// in both rounds whatever happens, so that a local failure never leaves the
	// others waiting in the OOB.
	tc := c.tls[0]
	t.reach = tc.Reach()
	var addr []byte
	localErr := t.fs.hit(FaultTeam)
	if localErr == nil {
		params := TeamParams{Rank: rank, Size: size, Fault: t.fs.hit, NextSeq: t.nextSeq.Load, Algs: c.cfg.Algs}
		t.tl, addr, localErr = tc.NewEndpoint(params)
	}
	if localErr == nil {
		t.msg = make([]byte, t.tl.MaxCtl())
		if len(t.msg) < ctlHeader+16 {
			localErr = fmt.Errorf("TL control messages are too small (%d bytes)", len(t.msg))
		}
	}
	round1 := append([]byte{0}, addr...)
	if localErr != nil {
		round1 = append([]byte{1}, localErr.Error()...)
	}
	fail := func(err error) (*Team, error) {
		if t.tl != nil {
			err = errors.Join(err, t.tl.Close())
		}
		t.dctx.disarm()
		return nil, fmt.Errorf("coll: NewTeam rank %d of %d: %w", rank, size, err)
	}
	addrs, err := oob.Allgather(ctx, round1)
	if err != nil {
		return fail(errors.Join(localErr, err))
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
		return fail(errors.Join(localErr, peerErr, err))
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
	return t, nil
}

// Rank is this member's rank.
func (t *Team) Rank() int { return t.rank }

// Size is the number of ranks.
func (t *Team) Size() int { return t.size }

// Broken returns nil while the team is usable, else an error wrapping ErrTeamBroken.
func (t *Team) Broken() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.broken
}

// Close releases the team's transport. It fails with ErrBusy while a request of the
// team is open. It does not communicate: peers still running collectives with this
// rank see them fail. Idempotent and nil-safe.
func (t *Team) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	if n := len(t.reqs); n > 0 {
		return fmt.Errorf("coll: Team.Close: %d request(s) still open: %w", n, ErrBusy)
	}
	// Tell the peers: collectives from nextSeq on will never see this
	// rank, and they fail them at once rather than at their deadline.
	if t.broken == nil {
		m := t.encode(ctlLeft, 0, t.nextSeq.Load(), 0, uint32(t.rank), 0, fmt.Sprintf("rank %d closed its team", t.rank))
		for p := 0; p < t.size; p++ {
			if p != t.rank && !t.tl.PeerDown(p) {
				_ = t.tl.SendCtl(p, m)
			}
		}
	}
	if err := t.tl.Close(); err != nil {
		return fmt.Errorf("coll: Team.Close: %w", err)
	}
	if err := t.scratch.close(); err != nil {
		return fmt.Errorf("coll: Team.Close: freeing staging buffers: %w", err)
	}
	t.closed = true
	t.dctx.disarm()
	t.c.mu.Lock()
	t.c.teams--
	t.c.mu.Unlock()
	return nil
}

// setBroken marks the team broken (once), fails what is in flight, and tells the
// peers.
func (t *Team) setBroken(err error) {
	if t.broken != nil {
		return
	}
	t.broken = &brokenError{err}
	if !t.flooded {
		t.flooded = true
		m := t.encode(ctlBroken, 0, 0, 0, uint32(t.rank), 0, err.Error())
		for p := 0; p < t.size; p++ {
			if p != t.rank && !t.tl.PeerDown(p) {
				_ = t.tl.SendCtl(p, m)
			}
		}
	}
	for _, r := range t.reqs {
		r.fail(t.broken, nil)
	}
}

func (t *Team) encode(kind, flags byte, seq uint64, post, origin, sig uint32, cause string) []byte {
	m := t.msg
	m[0], m[1], m[2], m[3] = kind, flags, 0, 0
	binary.LittleEndian.PutUint64(m[4:], seq)
	binary.LittleEndian.PutUint32(m[12:], post)
	binary.LittleEndian.PutUint32(m[16:], origin)
	binary.LittleEndian.PutUint32(m[20:], sig)
	n := copy(m[ctlHeader:], cause)
	return m[:ctlHeader+n]
}

// OnCtl handles a control message of coll; the TL calls it from Poll, under t.mu.
func (t *Team) OnCtl(peer int, msg []byte) {
	if len(msg) < ctlHeader || peer < 0 || peer >= t.size {
		return
	}
	kind, flags := msg[0], msg[1]
	seq := binary.LittleEndian.Uint64(msg[4:])
	post := binary.LittleEndian.Uint32(msg[12:])
	origin := int(binary.LittleEndian.Uint32(msg[16:]))
	sig := binary.LittleEndian.Uint32(msg[20:])
	cause := string(msg[ctlHeader:])
	if kind == ctlBroken {
		t.setBroken(&PeerError{Rank: origin, Cause: cause, Broken: true})
		return
	}
	if kind == ctlLeft {
		t.peerLeft(origin, seq, cause)
		return
	}
	r := t.reqs[seq]
	if r == nil {
		if seq >= t.nextSeq.Load() {
			ps := t.pending[seq]
			if ps == nil {
				ps = &pendingSeq{}
				t.pending[seq] = ps
			}
			ps.msgs = append(ps.msgs, pendingMsg{peer, append([]byte(nil), msg...)})
			if kind == ctlAbort && post > ps.flooded {
				ps.flooded = post
				t.flood(seq, post, origin, cause, flags&flagBroken != 0, 0)
			}
		} else if kind == ctlAbort && flags&flagAck == 0 {
			// A collective this rank finished or never had: say that nothing more
			// will come from here, so that the sender need not wait for it.
			_ = t.tl.SendCtl(peer, t.encode(ctlAbort, flagAck, seq, post, uint32(origin), 0, cause))
		}
		return
	}
	r.onCtl(peer, kind, flags, post, origin, sig, cause)
}

// flood tells every peer but skip... that (seq, post) failed.
func (t *Team) flood(seq uint64, post uint32, origin int, cause string, broken bool, flags byte) {
	if broken {
		flags |= flagBroken
	}
	if max := len(t.msg) - ctlHeader; len(cause) > max {
		cause = cause[:max-3] + "..."
	}
	m := t.encode(ctlAbort, flags, seq, post, uint32(origin), 0, cause)
	for p := 0; p < t.size; p++ {
		if p != t.rank && !t.gone(p, seq) {
			_ = t.tl.SendCtl(p, m)
		}
	}
}

// progressLocked polls the TL once and advances every live request.
func (t *Team) progressLocked() {
	if t.closed {
		return
	}
	if err := t.tl.Poll(t); err != nil && t.broken == nil {
		t.setBroken(err)
	}
	if err := t.tl.Broken(); err != nil && t.broken == nil {
		t.setBroken(err)
	}
	now := time.Now()
	for _, r := range t.reqs {
		r.advance(now)
	}
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// spinPolls is how many times a waiter polls, yielding in between, before it blocks:
// completions of a short collective come within a few scheduler rounds, and blocking
// costs a wake-up; with many ranks on few cores, spinning longer starves the peers.
const spinPolls = 8

// waitFor drives progress until r's post is finished.
func (t *Team) waitFor(ctx context.Context, r *Request) error {
	spins := 0
	for {
		t.mu.Lock()
		if r.state == sStalled {
			// An injected stall: this rank neither moves nor reads anything until its
			// deadline.
			d := r.deadline
			t.mu.Unlock()
			if err := sleepUntil(ctx, d); err != nil {
				t.mu.Lock()
				r.fail(r.ctxError(err), nil)
				t.mu.Unlock()
			} else {
				t.mu.Lock()
				r.advance(time.Now())
				t.mu.Unlock()
			}
			continue
		}
		t.progressLocked()
		if r.state == sDone {
			err := r.err
			t.mu.Unlock()
			return err
		}
		if err := ctx.Err(); err != nil {
			now := time.Now()
			if r.ctxErr == nil {
				r.ctxErr = err
			}
			if r.deadline.IsZero() || r.deadline.After(now) {
				r.deadline = now
			}
			if r.state != sAborting && !r.lateDecision(now) {
				r.fail(r.ctxError(err), nil)
			}
			// The abort still waits, bounded by AbortGrace, for the peers'
			// acknowledgements: the caller's ctx no longer bounds it.
			ctx = context.Background()
			t.mu.Unlock()
			continue
		}
		wake := r.wakeAt()
		if spins < spinPolls {
			spins++
			t.mu.Unlock()
			runtime.Gosched()
			continue
		}
		spins = 0
		if !t.waiting {
			t.waiting = true
			t.mu.Unlock()
			err := t.waitEvent(ctx, wake)
			t.mu.Lock()
			t.waiting = false
			if t.changed != nil {
				close(t.changed)
				t.changed = nil
			}
			t.mu.Unlock()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.mu.Lock()
				t.setBroken(fmt.Errorf("waiting for completions: %w", err))
				t.mu.Unlock()
			}
			continue
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		ch := t.changed
		t.mu.Unlock()
		waitBehind(ctx, ch, wake)
	}
}

// waitEvent blocks in the TL until an event, ctx's end or wake (zero: none).
func (t *Team) waitEvent(ctx context.Context, wake time.Time) error {
	d, has := ctx.Deadline()
	switch {
	case wake.IsZero() || (has && !d.After(wake)):
		return t.tl.WaitEvent(ctx)
	case ctx.Done() == nil:
		t.dctx.arm(wake)
		err := t.tl.WaitEvent(t.dctx)
		t.dctx.disarm()
		return err
	}
	wctx, cancel := context.WithDeadline(ctx, wake)
	defer cancel()
	return t.tl.WaitEvent(wctx)
}

func waitBehind(ctx context.Context, ch chan struct{}, wake time.Time) {
	var tc <-chan time.Time
	if !wake.IsZero() {
		tm := time.NewTimer(time.Until(wake))
		defer tm.Stop()
		tc = tm.C
	}
	select {
	case <-ch:
	case <-ctx.Done():
	case <-tc:
	}
}

func sleepUntil(ctx context.Context, d time.Time) error {
	if d.IsZero() {
		<-ctx.Done()
		return ctx.Err()
	}
	tm := time.NewTimer(time.Until(d))
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
func (t *Team) peerLeft(peer int, from uint64, cause string) {
	if old, ok := t.left[peer]; ok && old <= from {
		return
	}
	t.left[peer] = from
	for seq, r := range t.reqs {
		if seq < from {
			continue
		}
		pe := &PeerError{Rank: peer, Seq: seq, Post: r.post, Cause: cause}
		switch r.state {
		case sInit, sDone:
			next := *pe
			next.Post = r.post + 1
			if r.futureAbort == nil || next.Post < r.futureAbort.Post {
				r.futureAbort = &next
			}
		default:
			r.fail(pe, pe)
		}
	}
}

// leftBefore returns a PeerError for collective seq if a peer closed its
// team before it, or nil.
func (t *Team) leftBefore(seq uint64) *PeerError {
	for p, from := range t.left {
		if seq >= from {
			return &PeerError{Rank: p, Seq: seq, Post: 1, Cause: fmt.Sprintf("rank %d closed its team", p)}
		}
	}
	return nil
}
