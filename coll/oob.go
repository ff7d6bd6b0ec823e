package coll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// OOB is the out-of-band channel a team is bootstrapped through: typically MPI, a
// key-value store, or goroutines of one process (LocalOOB). Allgather is collective:
// every rank calls it in the same order, and it returns every rank's data, indexed by
// rank. It must honour ctx: a rank that never arrives must not keep the others beyond
// their ctx.
type OOB interface {
	Rank() int
	Size() int
	Allgather(ctx context.Context, data []byte) ([][]byte, error)
}

// PeerWatcher is an OOB that also learns when the process of one of its ranks dies, as
// TCPOOB does through the store. A team made over one fails at once when a process of
// it dies: in NewTeam, or in any collective in flight, with a *PeerError naming the rank
// (the team is then broken), instead of at the collective's deadline. A process that is
// merely slow is no death: only its deadline catches it.
type PeerWatcher interface {
	// WatchPeers starts watching. died is called from another goroutine with the rank
	// whose process died and what was seen, at most once per rank (a watch that learns
	// of one death may still learn of another: the store's server dying after it). stop
	// ends the watch; it waits for the watch's goroutine, so died is not called after it
	// returns. This rank's own notice outlives stop where the OOB ties it to the
	// process: TCPOOB's is a will on the process's store connection, which closing the
	// client withdraws (a process that exits without closing it is reported dead).
	WatchPeers(ctx context.Context, died func(rank int, cause string)) (stop func(), err error)
}

// LocalOOB returns n OOB endpoints for n goroutine ranks of one process. Each endpoint
// belongs to one goroutine at a time. The m-th Allgather of every endpoint forms round
// m; a rank whose call ended (its ctx ended) leaves that round incomplete, and the
// others' calls end with their own ctx. Nothing is left blocked: a call waits only on
// its ctx and on its round.
func LocalOOB(n int) []OOB {
	if n <= 0 {
		return nil
	}
	h := &oobHub{n: n, rounds: map[int]*oobRound{}}
	out := make([]OOB, n)
	for i := range out {
		out[i] = &localOOB{hub: h, rank: i}
	}
	return out
}

type oobHub struct {
	mu     sync.Mutex
	n      int
	rounds map[int]*oobRound
	// boxes are the teams' mailboxes (Messenger), by team channel and rank.
	boxes map[[2]int]*localBox
}

type oobRound struct {
	data    [][]byte
	in      []bool // which ranks arrived
	arrived int
	left    int // ranks that took the result or gave up; the round is dropped at n
	done    chan struct{}
}

type localOOB struct {
	hub   *oobHub
	rank  int
	round int
	boxes int // mailboxes opened: the next team's channel
}

func (o *localOOB) Rank() int { return o.rank }
func (o *localOOB) Size() int { return o.hub.n }

func (o *localOOB) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	if ctx == nil {
		return nil, invalid("OOB.Allgather", "nil context.Context")
	}
	h := o.hub
	m := o.round
	o.round++
	h.mu.Lock()
	r := h.rounds[m]
	if r == nil {
		r = &oobRound{data: make([][]byte, h.n), in: make([]bool, h.n), done: make(chan struct{})}
		h.rounds[m] = r
	}
	r.data[o.rank] = append([]byte(nil), data...)
	r.in[o.rank] = true
	r.arrived++
	if r.arrived == h.n {
		close(r.done)
	}
	h.mu.Unlock()

	var err error
	select {
	case <-r.done:
	case <-ctx.Done():
		h.mu.Lock()
		missing := missingRanks(r.in)
		h.mu.Unlock()
		err = fmt.Errorf("coll: LocalOOB rank %d: allgather round %d: waiting for %s: %w", o.rank, m, missing, ctx.Err())
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w (%w)", err, ErrTimeout)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	r.left++
	if r.left == h.n {
		delete(h.rounds, m)
	}
	if err != nil {
		select {
		case <-r.done: // completed meanwhile: take the result after all
		default:
			return nil, err
		}
	}
	out := make([][]byte, h.n)
	for i, d := range r.data {
		out[i] = append([]byte(nil), d...)
	}
	return out, nil
}

// Messenger is an OOB that also carries point-to-point messages between its ranks.
// A team made over one gives its transport a mailbox, so that the transport can
// connect to a peer when it first talks to it (tlmlx5 exchanges queue pair numbers
// through it) instead of to every peer at NewTeam: team creation is then one
// exchange of small addresses, and a rank holds connections only to the peers its
// collectives use. Over an OOB that is no Messenger the transport connects to every
// peer at NewTeam (a full mesh: n-1 connections per rank, made up front).
type Messenger interface {
	OOB
	// Mailbox opens this rank's mailbox of the next team made over the OOB: the k-th
	// call of every rank opens the same team's mailboxes, as NewTeam calls it once
	// per team, in the same order on every rank.
	Mailbox() (Mailbox, error)
}

// Mailbox is one rank's end of a team's message channel. Messages sent to a rank
// before it listens are kept for it.
type Mailbox interface {
	// Send queues msg (at most 256 bytes) for rank peer. It never blocks, and msg
	// may be reused when it returns. An error says it can never arrive: peer's
	// mailbox is closed (its team closed or failed).
	Send(peer int, msg []byte) error
	// Gone returns an error wrapping ErrClosed once it is known that peer's mailbox
	// is closed, else nil: a message sent to it before it closed may have been
	// dropped unread. It never blocks; a mailbox that cannot tell cheaply returns nil.
	Gone(peer int) error
	// Listen starts delivering what was sent to this rank to recv, from one
	// goroutine, in order per sender. It is called once. An empty msg is no message
	// but the mailbox's news of from (Send refuses empty messages): ask Gone(from)
	// again. A mailbox whose Gone learns in the background (TCPOOB's) delivers it,
	// from any goroutine, so that a waiting rank wakes for what it learnt.
	Listen(recv func(from int, msg []byte))
	// Close stops the delivery and waits for recv to return; what is sent to this
	// rank afterwards is refused (an error wrapping ErrClosed that carries why) or
	// dropped. Idempotent.
	Close(why string)
}

// LeavingCloser is a Mailbox that can also be told, as its team closes, the first
// collective the closing rank took no part in. A closing Team calls CloseLeaving
// instead of Close where its mailbox has it. Its refusals (Send, Gone) should then
// return a *LeftError carrying that bound: a peer that learns of the close that way
// fails only the collectives from the bound on. A refusal without one says only that
// the rank left, and fails every collective still in flight with it there, though it
// may have done its part of them.
type LeavingCloser interface {
	CloseLeaving(from uint64, why string)
}

// LeftError is a mailbox's refusal of a message to a rank whose team closed, with the
// first collective that rank took no part in (its next, or the first its broken team
// failed). It wraps ErrClosed.
type LeftError struct {
	Rank int    // the rank whose team closed
	From uint64 // the first collective it took no part in
	Why  string // why its team closed
	Via  string // who refused (the OOB's name), for the message
}

func (e *LeftError) Error() string {
	return fmt.Sprintf("coll: %s: rank %d's team closed its mailbox, taking no part in collective #%d or later (%s): %v",
		e.Via, e.Rank, e.From, e.Why, ErrClosed)
}

func (e *LeftError) Unwrap() error { return ErrClosed }

// maxMessage bounds a Mailbox message (driver.MaxMessage).
const maxMessage = 256

// localBox is one rank's mailbox of one team of a LocalOOB.
type localBox struct {
	mu      sync.Mutex
	q       []boxMsg
	notify  chan struct{} // a token when q grew
	closed  bool
	why     string
	bounded bool   // closed with CloseLeaving: from is the closing rank's bound
	from    uint64 // the first collective the closed rank took no part in
	dropped []int  // senders of messages the listener dropped as the box closed
	stop    chan struct{}
	done    chan struct{}
	started bool
}

type boxMsg struct {
	from int
	msg  []byte
}

// localMailbox is rank's view of team channel ch of a LocalOOB.
type localMailbox struct {
	hub  *oobHub
	ch   int
	rank int
	box  *localBox
}

func (h *oobHub) box(ch, rank int) *localBox {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.boxes == nil {
		h.boxes = map[[2]int]*localBox{}
	}
	k := [2]int{ch, rank}
	b := h.boxes[k]
	if b == nil {
		b = &localBox{notify: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
		h.boxes[k] = b
	}
	return b
}

func (o *localOOB) Mailbox() (Mailbox, error) {
	ch := o.boxes
	o.boxes++
	return &localMailbox{hub: o.hub, ch: ch, rank: o.rank, box: o.hub.box(ch, o.rank)}, nil
}

// refusal is what a closed box says to a sender; b.mu is held.
func (b *localBox) refusal(peer int) error {
	if b.bounded {
		return &LeftError{Rank: peer, From: b.from, Why: b.why, Via: "LocalOOB"}
	}
	return fmt.Errorf("coll: LocalOOB: rank %d's team closed its mailbox (%s): %w", peer, b.why, ErrClosed)
}

func (m *localMailbox) Send(peer int, msg []byte) error {
	switch {
	case peer < 0 || peer >= m.hub.n || peer == m.rank:
		return invalid("Mailbox.Send", "peer %d of %d ranks (this is rank %d)", peer, m.hub.n, m.rank)
	case len(msg) > maxMessage:
		return invalid("Mailbox.Send", "message of %d bytes, at most %d", len(msg), maxMessage)
	case len(msg) == 0:
		return invalid("Mailbox.Send", "empty message (an empty delivery is the mailbox's news of the sender)")
	}
	b := m.hub.box(m.ch, peer)
	b.mu.Lock()
	if b.closed {
		defer b.mu.Unlock()
		return b.refusal(peer)
	}
	b.q = append(b.q, boxMsg{from: m.rank, msg: append([]byte(nil), msg...)})
	b.mu.Unlock()
	select {
	case b.notify <- struct{}{}:
	default:
	}
	return nil
}

func (m *localMailbox) Gone(peer int) error {
	if peer < 0 || peer >= m.hub.n {
		return nil
	}
	b := m.hub.box(m.ch, peer)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.refusal(peer)
	}
	return nil
}

func (m *localMailbox) Listen(recv func(from int, msg []byte)) {
	b := m.box
	b.mu.Lock()
	if b.started || b.closed {
		b.mu.Unlock()
		return
	}
	b.started = true
	b.mu.Unlock()
	go func() {
		defer close(b.done)
		for {
			b.mu.Lock()
			q := b.q
			b.q = nil
			b.mu.Unlock()
			for i, x := range q {
				select {
				case <-b.stop:
					b.mu.Lock()
					for _, y := range q[i:] {
						b.dropped = append(b.dropped, y.from)
					}
					b.mu.Unlock()
					return
				default:
				}
				recv(x.from, x.msg)
			}
			select {
			case <-b.notify:
			case <-b.stop:
				return
			}
		}
	}()
}

func (m *localMailbox) Close(why string) { m.close(why, false, 0) }

// CloseLeaving closes the mailbox with the closing rank's bound (LeavingCloser), which
// later refusals carry.
func (m *localMailbox) CloseLeaving(from uint64, why string) { m.close(why, true, from) }

func (m *localMailbox) close(why string, bounded bool, from uint64) {
	b := m.box
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed, b.why, b.bounded, b.from = true, why, bounded, from
	dropped := make([]int, 0, len(b.q))
	for _, x := range b.q {
		dropped = append(dropped, x.from)
	}
	b.q = nil
	started := b.started
	close(b.stop)
	b.mu.Unlock()
	if started {
		<-b.done
	}
	b.mu.Lock()
	dropped = append(dropped, b.dropped...)
	b.dropped = nil
	b.mu.Unlock()
	m.tellDropped(dropped)
	// The closed box stays in the hub, so that later sends to it fail.
}

// tellDropped gives each rank whose message this closing box dropped unread the
// mailbox's news of this rank (an empty delivery, Mailbox.Listen): its transport, whose
// hello went unanswered, asks Gone at once and learns the bound, instead of at its
// next poll, which a waiter asleep with nothing else to come would not make.
func (m *localMailbox) tellDropped(senders []int) {
	slices.Sort(senders)
	for _, s := range slices.Compact(senders) {
		if s == m.rank || s < 0 || s >= m.hub.n {
			continue
		}
		b := m.hub.box(m.ch, s)
		b.mu.Lock()
		if !b.closed {
			b.q = append(b.q, boxMsg{from: m.rank})
		}
		b.mu.Unlock()
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}

// missingRanks names the ranks of in that are false, the first eight of them: the
// ranks an OOB round still waits for.
func missingRanks(in []bool) string {
	var names []string
	n := 0
	for r, ok := range in {
		if !ok {
			if n < 8 {
				names = append(names, strconv.Itoa(r))
			}
			n++
		}
	}
	if n > 8 {
		names = append(names, fmt.Sprintf("and %d more", n-8))
	}
	what := "rank "
	if n > 1 {
		what = "ranks "
	}
	return what + strings.Join(names, ", ")
}
