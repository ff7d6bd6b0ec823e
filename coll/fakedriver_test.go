package coll_test

// An in-process fake transport for unit tests of coll's protocols (abort flooding and
// acknowledgement, the completion agreement, departure, breakage): no verbs, no
// tlmlx5, no data. The ranks of one team share a hub; SendCtl queues a copy of the
// message for the peer, and the peer's Poll hands what is queued to coll's Handler
// according to the test's policy:
//
//   - in order (the zero policy), as RC does;
//   - delayed: each message waits a random 0..MaxDelay polls of its receiver, the
//     head of each peer's queue holding back what follows (per-peer FIFO kept);
//   - CrossPeer: what is ready from different peers is interleaved at random (per-peer
//     FIFO kept), which RC allows and coll must tolerate;
//   - ReorderPeer: what is ready is handed over in a random permutation. RC never does
//     this: it breaks the per-peer FIFO that driver.Endpoint.SendCtl promises (an abort
//     never overtakes what was queued before it). Tests use it to find out which of
//     coll's guarantees hold without it; the fake moves no data, so only the order of
//     control messages among themselves is affected.
//   - Hold: a link can be held (nothing crosses it, FIFO kept) and released later: an
//     arbitrarily slow link, still a legal RC schedule.
//
// Nothing is ever duplicated. Messages are dropped only where RC loses them: on a link
// that was cut (CutOff, BreakLink; both directions, as a queue pair in the error
// state flushes), and to an endpoint that was closed (a dead peer). A muted endpoint
// models a hung process: its Poll delivers nothing (what is sent to it stays queued)
// and its WaitEvent blocks until its ctx ends or a link of it is cut.
//
// Tasks move no data: a post is done after a planned number of polls of its rank's
// endpoint, or fails (at Post, or in State after some polls), or never finishes on its
// own; after Abort it is quiesced after a planned number of polls.
//
// One transport ("fakeproto") is registered; coll.Config.Device names the hub, which
// the test registers in fakeHubs.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
)

const fakeTLName = "fakeproto"

func init() { driver.Register(fakeTransport{}) }

// The wire kinds of coll's control messages (control.go: kind in byte 0, flags in byte
// 1), used only to observe traffic and to trigger scenarios, never to alter it.
const (
	wireAbort  = 1
	wireDone   = 2
	wireFin    = 3
	wireBroken = 4
	wireLeft   = 5
	wireSig    = 6 // a rank's signature, to the children of the agreement tree
	wireSigUp  = 7 // the default mode's signature check, up the overlay tree
	wireSigOK  = 8 // its verdict, down
	wireAck    = 2 // flag bit of an acknowledgement
)

var (
	fakeHubs  sync.Map // device name -> *fakeHub
	fakeHubID atomic.Uint64
)

// errFakeTask is the failure the fake's tasks report when planned to fail.
var errFakeTask = errors.New("fake task failure")

// fakePolicy is how a hub delivers control messages.
type fakePolicy struct {
	// TaskPeers, if set, is what every task of rank of n reports as its peers (it must
	// be symmetric); nil: every other rank.
	TaskPeers   func(rank, n int) []int
	MaxDelay    int  // each message waits 0..MaxDelay polls of its receiver
	CrossPeer   bool // interleave what is ready from different peers at random
	ReorderPeer bool // deliver what is ready in a random permutation (breaks RC's FIFO)
	Batch       int  // at most this many messages per Poll (0: all that are ready)
}

func (p fakePolicy) String() string {
	s := fmt.Sprintf("delay<=%d", p.MaxDelay)
	if p.CrossPeer {
		s += " cross-peer"
	}
	if p.ReorderPeer {
		s += " reorder-peer"
	}
	if p.Batch > 0 {
		s += fmt.Sprintf(" batch %d", p.Batch)
	}
	return s
}

// taskPlan is what one post of one rank's task does.
type taskPlan struct {
	Polls    int   // polls of the endpoint after Post until it is done; < 0: never on its own
	PostErr  error // Post fails with it
	StateErr error // after Polls polls, State fails with it instead of reporting done
	// AbortPolls: polls after Abort until Quiesced; < 0: never, until every peer's link
	// is cut (a queue pair in the error state flushes what was posted on it).
	AbortPolls int
	// When, if set, must also hold (under the hub's lock) for the post to end.
	When func(h *fakeHub) bool
}

type fakeMsg struct {
	b       []byte
	readyAt int // receiver's poll count from which it may be delivered
}

type fakeCut struct {
	by, peer int
	why      string
}

// fakeHub is the network of one team.
type fakeHub struct {
	dev  string
	n    int
	mu   sync.Mutex
	intn func(n int) int // randomness, under mu
	pol  fakePolicy
	plan func(rank int, seq uint64, post uint32) taskPlan

	eps   []*fakeEP
	q     [][][]fakeMsg // q[from][to]
	down  [][]bool      // down[a][b]: the link a-b failed (symmetric)
	held  [][]bool      // held[from][to]: nothing crosses for now
	mute  []bool
	cuts  []fakeCut
	broke []string // BreakLink calls
	// waits counts WaitEvent calls, waitMax is the longest time to its ctx's deadline
	// that one had at its start, and unbounded counts those whose ctx had none.
	waits, unbounded int
	waitMax          time.Duration

	// onSend, if set, sees every message SendCtl queues, under mu, before it is
	// queued (it may hold links).
	onSend func(h *fakeHub, from, to int, b []byte)
	// doneTo counts the completion reports delivered to each rank, abortsFrom the
	// aborts (not acknowledgements) each rank sent.
	doneTo, abortsFrom []int
	// doneSeqTo is, per rank, 1 + the highest collective of the completion reports
	// delivered to it (0: none yet).
	doneSeqTo []uint64

	regs      int // live registrations
	tasksOpen int
	epsOpen   int
	sent      [9]int // by kind
	delivered [9]int
	dropped   int
	postErrs  int
	stateErrs int

	// clock orders what follows: aborts0[r] lists when ({clock, post}) rank r was
	// handed an abort (not an acknowledgement) of collective 0, and of which post;
	// doneAt[{r, post}] when rank r's task of collective 0 reported that post done.
	clock   int
	aborts0 [][][2]int
	doneAt  map[[2]int]int
	// posted0[r]: the last post of collective 0 that rank r's task started (a post
	// that failed at Post did not).
	posted0 []uint32
}

// newsAt is when rank was first handed an abort of collective 0 naming post or an
// earlier one (the news that fails post), 0 for never. Under h.mu.
func (h *fakeHub) newsAt(rank, post int) int {
	for _, a := range h.aborts0[rank] {
		if a[1] <= post {
			return a[0]
		}
	}
	return 0
}

// peersPosted0 reports whether every task peer of rank posted post of collective 0:
// a plan's When that makes a post depend on its peers' data, as a real one does.
// Under h.mu.
func (h *fakeHub) peersPosted0(rank int, post uint32) bool {
	k := &fakeTask{ep: h.eps[rank]}
	for _, p := range k.Peers() {
		if h.posted0[p] < post {
			return false
		}
	}
	return true
}

// newFakeHub makes the network of a team of n ranks. rnd seeds its randomness.
func newFakeHub(t testing.TB, n int, pol fakePolicy, rnd *rand.Rand) *fakeHub {
	seed := rnd.Uint64()
	r := rand.New(rand.NewPCG(seed, seed>>1|1))
	h := newFakeHubIntn(n, pol, r.IntN)
	t.Cleanup(func() { fakeHubs.Delete(h.dev) })
	return h
}

func newFakeHubIntn(n int, pol fakePolicy, intn func(int) int) *fakeHub {
	h := &fakeHub{
		dev:  "fakehub" + strconv.FormatUint(fakeHubID.Add(1), 10),
		n:    n,
		intn: intn,
		pol:  pol,
		plan: func(int, uint64, uint32) taskPlan { return taskPlan{} },
		eps:  make([]*fakeEP, n),
		q:    make([][][]fakeMsg, n),
		down: make([][]bool, n),
		held: make([][]bool, n),
		mute: make([]bool, n),

		doneTo:     make([]int, n),
		abortsFrom: make([]int, n),
		doneSeqTo:  make([]uint64, n),
		aborts0:    make([][][2]int, n),
		posted0:    make([]uint32, n),
		doneAt:     map[[2]int]int{},
	}
	for i := range n {
		h.q[i] = make([][]fakeMsg, n)
		h.down[i] = make([]bool, n)
		h.held[i] = make([]bool, n)
	}
	fakeHubs.Store(h.dev, h)
	return h
}

func (h *fakeHub) setPlan(f func(rank int, seq uint64, post uint32) taskPlan) {
	h.mu.Lock()
	h.plan = f
	h.mu.Unlock()
}

// wakeLocked wakes rank's WaitEvent.
func (h *fakeHub) wakeLocked(rank int) {
	if ep := h.eps[rank]; ep != nil {
		select {
		case ep.wake <- struct{}{}:
		default:
		}
	}
}

// cutLocked fails the link a-b both ways, dropping what is queued on it.
func (h *fakeHub) cutLocked(a, b int) {
	h.down[a][b], h.down[b][a] = true, true
	h.dropped += len(h.q[a][b]) + len(h.q[b][a])
	h.q[a][b], h.q[b][a] = nil, nil
	h.wakeLocked(a)
	h.wakeLocked(b)
}

// hold stops (or, on false, lets again) anything crossing from -> to.
func (h *fakeHub) hold(from, to int, on bool) {
	h.mu.Lock()
	h.held[from][to] = on
	h.wakeLocked(to)
	h.mu.Unlock()
}

func (h *fakeHub) setMute(rank int, on bool) {
	h.mu.Lock()
	h.mute[rank] = on
	h.wakeLocked(rank)
	h.mu.Unlock()
}

// endedLocked reports whether rank's task of collective seq ended post (done or
// failed).
func (h *fakeHub) endedLocked(rank int, seq uint64, post uint32) bool {
	ep := h.eps[rank]
	if ep == nil {
		return false
	}
	for k := range ep.tasks {
		if k.seq == seq && (k.post > post || k.post == post && k.ended) {
			return true
		}
	}
	return false
}

func (h *fakeHub) cutOffs() []fakeCut {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]fakeCut(nil), h.cuts...)
}

func (h *fakeHub) stats() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("sent abort/done/fin/broken/left/sig/sigup/sigok %v, delivered %v, dropped %d, cut-offs %d, post errors %d, state errors %d",
		h.sent[1:], h.delivered[1:], h.dropped, len(h.cuts), h.postErrs, h.stateErrs)
}

// leaks reports what the fake still holds after every team closed.
func (h *fakeHub) leaks() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var e []string
	if h.regs != 0 {
		e = append(e, fmt.Sprintf("%d registrations", h.regs))
	}
	if h.tasksOpen != 0 {
		e = append(e, fmt.Sprintf("%d tasks", h.tasksOpen))
	}
	if h.epsOpen != 0 {
		e = append(e, fmt.Sprintf("%d endpoints", h.epsOpen))
	}
	if len(e) > 0 {
		return fmt.Errorf("fake transport: still open: %s", strings.Join(e, ", "))
	}
	return nil
}

// --- driver.Transport, driver.Context ---

type fakeTransport struct{}

func (fakeTransport) Name() string { return fakeTLName }

func (fakeTransport) Open(cfg driver.Config) (driver.Context, error) {
	v, ok := fakeHubs.Load(cfg.Device)
	if !ok {
		return nil, fmt.Errorf("fakeproto: no hub %q", cfg.Device)
	}
	return &fakeCtx{h: v.(*fakeHub)}, nil
}

type fakeCtx struct{ h *fakeHub }

func (c *fakeCtx) Reach() mem.Reach { return mem.Reach{} }
func (c *fakeCtx) Close() error     { return nil }

func (c *fakeCtx) NewEndpoint(p driver.TeamParams) (driver.Endpoint, []byte, error) {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.Size != h.n || p.Rank < 0 || p.Rank >= h.n || h.eps[p.Rank] != nil {
		return nil, nil, fmt.Errorf("fakeproto: rank %d of %d on a hub of %d: %w", p.Rank, p.Size, h.n, driver.ErrInvalid)
	}
	ep := &fakeEP{h: h, rank: p.Rank, wake: make(chan struct{}, 1), tasks: map[*fakeTask]bool{}}
	h.eps[p.Rank] = ep
	h.epsOpen++
	return ep, []byte(strconv.Itoa(p.Rank)), nil
}

// --- driver.Endpoint ---

type fakeEP struct {
	h     *fakeHub
	rank  int
	wake  chan struct{}
	polls int // under h.mu
	// completions: polls that found messages waiting; atomic, since the keeper reads
	// it under its team's lock, which another path holds while it takes h.mu
	completions atomic.Uint64
	closed      bool
	tasks       map[*fakeTask]bool
}

func (e *fakeEP) Connect(addrs [][]byte) error {
	if len(addrs) != e.h.n {
		return fmt.Errorf("fakeproto: %d addresses for %d ranks", len(addrs), e.h.n)
	}
	for i, a := range addrs {
		if string(a) != strconv.Itoa(i) {
			return fmt.Errorf("fakeproto: rank %d's address is %q", i, a)
		}
	}
	return nil
}

type fakeReg struct {
	h    *fakeHub
	once sync.Once
}

func (r *fakeReg) Close() error {
	r.once.Do(func() {
		r.h.mu.Lock()
		r.h.regs--
		r.h.mu.Unlock()
	})
	return nil
}

func (e *fakeEP) Register(*mem.Buffer) (io.Closer, error) {
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	e.h.regs++
	return &fakeReg{h: e.h}, nil
}

func (e *fakeEP) NewTask(spec *driver.TaskSpec) (driver.Task, error) {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.closed {
		return nil, driver.ErrClosed
	}
	k := &fakeTask{ep: e, seq: spec.Seq, typ: spec.Type}
	e.tasks[k] = true
	h.tasksOpen++
	return k, nil
}

func (e *fakeEP) MaxCtl() int { return 256 }

func (e *fakeEP) SendCtl(peer int, msg []byte) error {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case peer < 0 || peer >= h.n || peer == e.rank:
		return fmt.Errorf("fakeproto: SendCtl to rank %d from %d: %w", peer, e.rank, driver.ErrInvalid)
	case len(msg) > e.MaxCtl():
		return fmt.Errorf("fakeproto: %d-byte control message: %w", len(msg), driver.ErrInvalid)
	case e.closed:
		return driver.ErrClosed
	}
	if len(msg) == 0 {
		return fmt.Errorf("fakeproto: empty control message: %w", driver.ErrInvalid)
	}
	if k := int(msg[0]); k < len(h.sent) {
		h.sent[k]++
	}
	if msg[0] == wireAbort && len(msg) > 1 && msg[1]&wireAck == 0 {
		h.abortsFrom[e.rank]++
	}
	if h.onSend != nil {
		h.onSend(h, e.rank, peer, msg)
	}
	if h.down[e.rank][peer] {
		h.dropped++
		return fmt.Errorf("fakeproto: link %d-%d is down", e.rank, peer)
	}
	if to := h.eps[peer]; to == nil || to.closed {
		h.dropped++ // a dead peer
		return nil
	}
	d := 0
	if h.pol.MaxDelay > 0 {
		d = h.intn(h.pol.MaxDelay + 1)
	}
	h.q[e.rank][peer] = append(h.q[e.rank][peer], fakeMsg{b: append([]byte(nil), msg...), readyAt: h.eps[peer].polls + d})
	h.wakeLocked(peer)
	return nil
}

type fakeIn struct {
	from int
	b    []byte
}

// takeLocked removes from the queues what this Poll delivers, in delivery order.
func (e *fakeEP) takeLocked() []fakeIn {
	h := e.h
	if h.mute[e.rank] {
		return nil
	}
	var per [][]fakeIn // per peer, in queue order
	for from := 0; from < h.n; from++ {
		if from == e.rank || h.held[from][e.rank] {
			continue
		}
		q := h.q[from][e.rank]
		var ready []fakeIn
		var keep []fakeMsg
		if h.pol.ReorderPeer {
			for _, m := range q {
				if m.readyAt <= e.polls {
					ready = append(ready, fakeIn{from, m.b})
				} else {
					keep = append(keep, m)
				}
			}
		} else {
			i := 0
			for ; i < len(q) && q[i].readyAt <= e.polls; i++ {
				ready = append(ready, fakeIn{from, q[i].b})
			}
			keep = q[i:] // FIFO: the head holds back the rest
		}
		h.q[from][e.rank] = keep
		if len(ready) > 0 {
			per = append(per, ready)
		}
	}
	var out []fakeIn
	switch {
	case h.pol.ReorderPeer:
		for _, p := range per {
			out = append(out, p...)
		}
		for i := len(out) - 1; i > 0; i-- {
			j := h.intn(i + 1)
			out[i], out[j] = out[j], out[i]
		}
	case h.pol.CrossPeer:
		for len(per) > 0 {
			i := h.intn(len(per))
			out = append(out, per[i][0])
			if per[i] = per[i][1:]; len(per[i]) == 0 {
				per = append(per[:i], per[i+1:]...)
			}
		}
	default:
		for _, p := range per {
			out = append(out, p...)
		}
	}
	if b := h.pol.Batch; b > 0 && len(out) > b {
		// Put back what this Poll does not deliver, in front of what is still
		// queued, keeping each peer's order.
		rest := out[b:]
		out = out[:b]
		back := make([][]fakeMsg, h.n)
		for _, m := range rest {
			back[m.from] = append(back[m.from], fakeMsg{b: m.b, readyAt: e.polls})
		}
		for from, ms := range back {
			if len(ms) > 0 {
				h.q[from][e.rank] = append(ms, h.q[from][e.rank]...)
			}
		}
	}
	for _, m := range out {
		if k := int(m.b[0]); k < len(h.delivered) {
			h.delivered[k]++
		}
		if m.b[0] == wireAbort && len(m.b) >= 16 && m.b[1]&wireAck == 0 && binary.LittleEndian.Uint64(m.b[4:]) == 0 {
			h.clock++
			h.aborts0[e.rank] = append(h.aborts0[e.rank], [2]int{h.clock, int(binary.LittleEndian.Uint32(m.b[12:]))})
		}
		if m.b[0] == wireDone {
			h.doneTo[e.rank]++
			if len(m.b) >= 12 {
				h.doneSeqTo[e.rank] = max(h.doneSeqTo[e.rank], binary.LittleEndian.Uint64(m.b[4:])+1)
			}
		}
	}
	return out
}

func (e *fakeEP) Poll(hd driver.Handler) error {
	h := e.h
	h.mu.Lock()
	if e.closed {
		h.mu.Unlock()
		return driver.ErrClosed
	}
	e.polls++
	if e.readyLocked() {
		// Messages wait for this rank: a NIC would land them without the CPU, and
		// here they wait for polls (MaxDelay), which the keeper of an idle rank
		// gives only at its quick pace while it sees completions move.
		e.completions.Add(1)
	}
	in := e.takeLocked()
	h.mu.Unlock()
	for _, m := range in {
		hd.Control(m.from, m.b)
	}
	return nil
}

// Completions counts the polls that found messages waiting (driver.Counter).
func (e *fakeEP) Completions() uint64 { return e.completions.Load() }

// readyLocked reports whether a Poll may find something to do.
func (e *fakeEP) readyLocked() bool {
	h := e.h
	if h.mute[e.rank] {
		return false
	}
	for from := 0; from < h.n; from++ {
		if len(h.q[from][e.rank]) > 0 && !h.held[from][e.rank] {
			return true
		}
	}
	for k := range e.tasks {
		if k.movingLocked() {
			return true
		}
	}
	return false
}

func (e *fakeEP) WaitEvent(ctx context.Context) error {
	h := e.h
	h.mu.Lock()
	h.waits++
	if d, ok := ctx.Deadline(); ok {
		h.waitMax = max(h.waitMax, time.Until(d))
	} else {
		h.unbounded++
	}
	ready := e.readyLocked()
	h.mu.Unlock()
	if ready {
		return nil
	}
	select {
	case <-e.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *fakeEP) Broken() error {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, d := range h.down[e.rank] {
		if d {
			return fmt.Errorf("fakeproto: rank %d's link to rank %d failed", e.rank, p)
		}
	}
	return nil
}

func (e *fakeEP) Unsent() int { return 0 }

func (e *fakeEP) PeerDown(peer int) bool {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	return peer >= 0 && peer < h.n && h.down[e.rank][peer]
}

func (e *fakeEP) CutOff(peer int, why string) {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cuts = append(h.cuts, fakeCut{by: e.rank, peer: peer, why: why})
	if peer >= 0 && peer < h.n && peer != e.rank {
		h.cutLocked(e.rank, peer)
	}
}

func (e *fakeEP) Close() error {
	h := e.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.closed {
		return nil
	}
	if len(e.tasks) > 0 {
		return fmt.Errorf("fakeproto: Close with %d tasks open: %w", len(e.tasks), driver.ErrBusy)
	}
	e.closed = true
	h.epsOpen--
	// What was sent to this rank is lost (a dead peer); what it sent is on the wire
	// already and still arrives.
	for from := range h.n {
		h.dropped += len(h.q[from][e.rank])
		h.q[from][e.rank] = nil
	}
	return nil
}

// --- driver.Task ---

type fakeTask struct {
	ep   *fakeEP
	seq  uint64
	typ  coll.CollType
	plan taskPlan
	post uint32

	posted, aborted, ended bool // ended: done or failed
	err                    error
	start, abortAt         int
	closed                 bool
}

func (k *fakeTask) Alg() string { return "fake" }

// Peers: the hub's TaskPeers, else every other rank (a fake task moves no data, so
// any symmetric graph is one the transport could report).
func (k *fakeTask) Peers() []int {
	h := k.ep.h
	if h.pol.TaskPeers != nil {
		return h.pol.TaskPeers(k.ep.rank, h.n)
	}
	var ps []int
	for p := 0; p < h.n; p++ {
		if p != k.ep.rank {
			ps = append(ps, p)
		}
	}
	return ps
}

// Writers: every peer from Post until the post is done here (the fake moves no data,
// so a peer may write until then, a task that failed in State included); none when
// it was never posted, failed at Post (it exposed nothing) or is done.
func (k *fakeTask) Writers(buf []int) []int {
	h := k.ep.h
	h.mu.Lock()
	none := !k.posted || k.plan.PostErr != nil || k.ended && k.err == nil
	h.mu.Unlock()
	if none {
		return buf
	}
	return append(buf, k.Peers()...)
}

func (k *fakeTask) Post(post uint32) error {
	h := k.ep.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if k.closed {
		return driver.ErrClosed
	}
	k.plan = h.plan(k.ep.rank, k.seq, post)
	k.post, k.posted, k.aborted, k.ended, k.err = post, true, false, false, nil
	k.start = k.ep.polls
	if k.plan.PostErr != nil {
		h.postErrs++
		k.ended = true
		return fmt.Errorf("fake post %d of #%d on rank %d: %w", post, k.seq, k.ep.rank, k.plan.PostErr)
	}
	if k.seq == 0 {
		h.posted0[k.ep.rank] = post
	}
	return nil
}

// dueLocked reports whether the post reached its planned end.
func (k *fakeTask) dueLocked() bool {
	if k.plan.Polls < 0 || k.ep.polls-k.start < k.plan.Polls {
		return false
	}
	return k.plan.When == nil || k.plan.When(k.ep.h)
}

// movingLocked reports whether polling moves the task along.
func (k *fakeTask) movingLocked() bool {
	if !k.posted || k.ended {
		return false
	}
	if k.aborted {
		return !k.quiescedLocked()
	}
	return k.plan.Polls >= 0
}

func (k *fakeTask) State() (bool, error) {
	h := k.ep.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !k.posted {
		return false, nil
	}
	if !k.ended && !k.aborted && k.dueLocked() {
		k.ended = true
		if k.plan.StateErr != nil {
			h.stateErrs++
			k.err = fmt.Errorf("fake post %d of #%d on rank %d: %w", k.post, k.seq, k.ep.rank, k.plan.StateErr)
		} else if k.seq == 0 {
			h.clock++
			h.doneAt[[2]int{k.ep.rank, int(k.post)}] = h.clock
		}
	}
	if k.err != nil {
		return false, k.err
	}
	return k.ended, nil
}

func (k *fakeTask) Abort() {
	h := k.ep.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !k.aborted {
		k.aborted = true
		k.abortAt = k.ep.polls
	}
}

func (k *fakeTask) quiescedLocked() bool {
	if !k.posted || k.ended {
		return true
	}
	if !k.aborted {
		return false
	}
	if k.plan.AbortPolls >= 0 {
		return k.ep.polls-k.abortAt >= k.plan.AbortPolls
	}
	for _, p := range k.Peers() {
		if !k.ep.h.down[k.ep.rank][p] {
			return false
		}
	}
	return true
}

func (k *fakeTask) Quiesced() bool {
	h := k.ep.h
	h.mu.Lock()
	defer h.mu.Unlock()
	return k.quiescedLocked()
}

func (k *fakeTask) Waiting() string {
	h := k.ep.h
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("fake task #%d post %d (%d of %d polls)", k.seq, k.post, k.ep.polls-k.start, k.plan.Polls)
}

// Tells: the fake's data carries no signature, so coll's check runs on its own
// messages here.
func (k *fakeTask) Tells(int) bool { return false }

// BreakLink fails the link to the next rank, as a queue pair in the error state.
func (k *fakeTask) BreakLink() error {
	h := k.ep.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n < 2 {
		return errors.New("fakeproto: no link to break in a team of one")
	}
	peer := (k.ep.rank + 1) % h.n
	h.broke = append(h.broke, fmt.Sprintf("%d-%d", k.ep.rank, peer))
	h.cutLocked(k.ep.rank, peer)
	return nil
}

func (k *fakeTask) Close() error {
	h := k.ep.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if k.closed {
		return nil
	}
	if k.posted && !k.quiescedLocked() {
		return fmt.Errorf("fakeproto: task #%d closed with post %d in flight: %w", k.seq, k.post, driver.ErrBusy)
	}
	k.closed = true
	delete(k.ep.tasks, k)
	h.tasksOpen--
	return nil
}

// --- a team of ranks over a hub ---

// fakeWorld is n goroutine ranks, each with its own Context, in a team over a hub.
type fakeWorld struct {
	t      testing.TB
	h      *fakeHub
	n      int
	ctxs   []*coll.Context
	teams  []*coll.Team
	closed bool
}

// fakeConfig is the Config of tests over the fake: a few seconds' Timeout so that a
// hang fails the test, and an AbortGrace long enough that no peer is cut off on a slow
// machine unless the test wants it.
// fakeConfig is the protocol tests' Config: all-or-nothing outcomes, whose agreement
// most of them examine; the default mode's tests clear AllOrNothing.
func fakeConfig() coll.Config {
	return coll.Config{Timeout: 5 * time.Second, AbortGrace: 3 * time.Second, AllOrNothing: true}
}

func newFakeWorld(t testing.TB, h *fakeHub, cfg coll.Config) *fakeWorld {
	t.Helper()
	return newFakeWorldEach(t, h, func(int) coll.Config { return cfg })
}

// newFakeWorldEach gives each rank its own Config.
func newFakeWorldEach(t testing.TB, h *fakeHub, cfg func(rank int) coll.Config) *fakeWorld {
	t.Helper()
	w, err := startFakeWorld(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.t = t
	t.Cleanup(func() {
		if err := w.close(); err != nil {
			t.Error(err)
		}
	})
	return w
}

func startFakeWorld(h *fakeHub, cfgFor func(rank int) coll.Config) (*fakeWorld, error) {
	n := h.n
	w := &fakeWorld{h: h, n: n, ctxs: make([]*coll.Context, n), teams: make([]*coll.Team, n)}
	oobs := coll.LocalOOB(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := cfgFor(i)
			cfg.TLs = []string{fakeTLName}
			cfg.Device = h.dev
			c, err := coll.NewContext(cfg)
			if err != nil {
				errs[i] = err
				return
			}
			w.ctxs[i] = c
			w.teams[i], errs[i] = c.NewTeam(ctx, oobs[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = w.close()
		return nil, err
	}
	return w, nil
}

// close closes every team and context, and checks that the fake holds nothing.
func (w *fakeWorld) close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	var errs []error
	for i := range w.n {
		if w.teams[i] != nil {
			if err := w.teams[i].Close(); err != nil {
				errs = append(errs, fmt.Errorf("rank %d: %w", i, err))
			}
		}
		if w.ctxs[i] != nil {
			if err := w.ctxs[i].Close(); err != nil {
				errs = append(errs, fmt.Errorf("rank %d: %w", i, err))
			}
		}
	}
	if len(errs) == 0 {
		errs = append(errs, w.h.leaks())
	}
	return errors.Join(errs...)
}

// run runs f on every rank concurrently and returns each rank's error.
func (w *fakeWorld) run(f func(rank int, tm *coll.Team) error) []error {
	errs := make([]error, w.n)
	var wg sync.WaitGroup
	for i := range w.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, w.teams[i])
		}()
	}
	wg.Wait()
	return errs
}

// testCtx bounds a test's collectives: a hang fails the test instead of sticking it.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
