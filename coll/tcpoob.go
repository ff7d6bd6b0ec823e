package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ibcoll/ibcoll/bootstrap"
)

// TCPOOB builds the OOB of a multi-process team from a connected store
// client: each Allgather is one store round, and the store drops a round's
// keys once the next one completes. All ranks must call Allgather in the
// same order, as every OOB requires. One client carries one TCPOOB; use
// TCPOOBNamed for more.
func TCPOOB(c *bootstrap.Client, rank, size int) (OOB, error) {
	return TCPOOBNamed(c, "ibcoll/oob", rank, size)
}

// TCPOOBNamed is TCPOOB with its own key space, so that several OOBs
// (one per team) can share a store client. Every rank must use the same name.
func TCPOOBNamed(c *bootstrap.Client, name string, rank, size int) (OOB, error) {
	switch {
	case c == nil:
		return nil, invalid("TCPOOB", "client is nil")
	case name == "":
		return nil, invalid("TCPOOB", "name is empty")
	case size < 1:
		return nil, invalid("TCPOOB", "size must be >= 1, got %d", size)
	case rank < 0 || rank >= size:
		return nil, invalid("TCPOOB", "rank %d is outside [0, %d)", rank, size)
	}
	return &tcpOOB{c: c, name: name, rank: rank, size: size}, nil
}

type tcpOOB struct {
	c          *bootstrap.Client
	name       string
	rank, size int
	mu         sync.Mutex
	boxes      int // mailboxes opened: the next team's channel
}

func (o *tcpOOB) Rank() int { return o.rank }
func (o *tcpOOB) Size() int { return o.size }

// Allgather fails saying what a lost connection to the store most likely means.
func (o *tcpOOB) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	all, err := o.c.Allgather(ctx, o.rank, o.size, o.name, data)
	if errors.Is(err, bootstrap.ErrDisconnected) {
		err = fmt.Errorf("coll: TCPOOB: this rank lost the store: %s: %w", storeLost, err)
	}
	return all, err
}

// WatchPeers makes the store tell the team when a rank's process dies: every rank
// leaves a will with the store under bootstrap.DiedKey that names it (bootstrap.Connect
// already did; doing it again changes nothing), and blocks on that key. A process that
// exits or is killed without closing its client drops its connection, the store sets
// the key, and every other rank learns who died within a round trip. A rank that loses
// its own connection to the store (the process serving it, rank 0 unless the store is
// external, died; or the network failed) reports rank 0, after a first death too: the
// key holds one name, and the job's launcher often ends the store's process next, which
// a rank still waiting on it must hear of. The key stays set: a store serves one job.
func (o *tcpOOB) WatchPeers(ctx context.Context, died func(rank int, cause string)) (func(), error) {
	key := bootstrap.DiedKey
	if err := o.c.Will(ctx, key, []byte(strconv.Itoa(o.rank))); err != nil {
		return nil, fmt.Errorf("coll: TCPOOB: watching peers: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err := o.c.Get(wctx, key)
		switch {
		case err == nil:
			r, perr := strconv.Atoi(string(v))
			if perr != nil || r < 0 || r >= o.size {
				died(-1, fmt.Sprintf("a process of the job died (the store names %q)", v))
				return
			}
			died(r, fmt.Sprintf("rank %d's process died (its connection to the store dropped)", r))
			if r == 0 {
				return
			}
			select {
			case <-o.c.Done():
				if err := o.c.Err(); !errors.Is(err, bootstrap.ErrClosed) {
					died(0, lostStore(err))
				}
			case <-wctx.Done():
			}
		case wctx.Err() != nil:
		case errors.Is(err, bootstrap.ErrClosed):
			// This rank closed its own client: not a peer's death.
		default:
			died(0, lostStore(err))
		}
	}()
	return func() {
		cancel()
		<-done
	}, nil
}

// storeLost says what a lost connection to the store most likely means.
const storeLost = "the process serving it (rank 0, unless the store is external) died, or the network failed"

func lostStore(err error) string {
	return fmt.Sprintf("this rank lost the store (%v): %s", err, storeLost)
}

// Mailbox opens the next team's mailbox in the store (see Messenger). Rank r's
// mailbox of team channel ch is a queue of keys: a sender takes a number from the
// counter "NAME/mb/CH/R/n" (Add) and sets the message under "NAME/mb/CH/R/K"; the
// receiver gets keys 1, 2, ... in turn (a blocking Get) and deletes each it read. One
// goroutine sends (Send queues for it and never blocks) and one receives; Close ends
// both. A message to a rank whose team closed stays in the store unread; Close leaves
// a mark under "NAME/mb/CH/R/closed" (with the closing rank's bound where the team gave
// it, CloseLeaving), which a sender whose link waits finds through Gone.
func (o *tcpOOB) Mailbox() (Mailbox, error) {
	o.mu.Lock()
	ch := o.boxes
	o.boxes++
	o.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	m := &tcpMailbox{o: o, prefix: o.name + "/mb/" + strconv.Itoa(ch) + "/", ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1), sent: make(chan struct{})}
	go m.sendLoop()
	return m, nil
}

type tcpMailbox struct {
	o      *tcpOOB
	prefix string
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	q      []boxMsg
	closed bool
	kick   chan struct{}
	sent   chan struct{} // closed when sendLoop returns
	recvd  chan struct{} // closed when the receive loop returns; nil before Listen
	recv   func(from int, msg []byte)
	// Peers asked about (Gone): what their closed mark said, and the asking.
	gone   map[int]*peerMark
	asking sync.WaitGroup // the goroutines asking the store
}

// peerMark is what this mailbox knows of a peer's closed mark (closedKey).
type peerMark struct {
	err   error     // the peer's refusal, once its mark was found
	since time.Time // the first Gone of this round of asking (a link being made)
	last  time.Time // the latest Gone
	next  time.Time // when the store may be asked next
	wait  time.Duration
	timer bool // a nudge or a look is scheduled or running
}

func (m *tcpMailbox) key(rank int, what string) string {
	return m.prefix + strconv.Itoa(rank) + "/" + what
}

// closedKey is where a rank's closed mailbox leaves its mark: a flag byte (1: the
// bound follows), the bound (8 bytes), and why.
const closedKey = "closed"

// A peer's closed mark is looked for only while a link to it is being made and has
// waited goneFirst: most links are up within a round trip through the store, and
// looking would add a store call to each. Then at goneFirst, doubling up to goneMax.
var (
	goneFirst = 100 * time.Millisecond
	goneMax   = time.Second
)

// closeMarkBound bounds the Set of the closed mark at Close: a store that is gone
// must not hold the team's Close.
const closeMarkBound = 2 * time.Second

func (m *tcpMailbox) Send(peer int, msg []byte) error {
	switch {
	case peer < 0 || peer >= m.o.size || peer == m.o.rank:
		return invalid("Mailbox.Send", "peer %d of %d ranks (this is rank %d)", peer, m.o.size, m.o.rank)
	case len(msg) > maxMessage:
		return invalid("Mailbox.Send", "message of %d bytes, at most %d", len(msg), maxMessage)
	case len(msg) == 0:
		return invalid("Mailbox.Send", "empty message (an empty delivery is the mailbox's news of the sender)")
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fmt.Errorf("coll: TCPOOB: mailbox closed: %w", ErrClosed)
	}
	if pm := m.gone[peer]; pm != nil && pm.err != nil {
		m.mu.Unlock()
		return pm.err
	}
	m.q = append(m.q, boxMsg{from: peer, msg: append([]byte(nil), msg...)})
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
	return nil
}

// sendLoop stores the queued messages in order. A message carries its sender's
// rank in its first 4 bytes.
func (m *tcpMailbox) sendLoop() {
	defer close(m.sent)
	for {
		m.mu.Lock()
		q := m.q
		m.q = nil
		m.mu.Unlock()
		for _, x := range q {
			k, err := m.o.c.Add(m.ctx, m.key(x.from, "n"), 1)
			if err != nil {
				return // the store is gone or the mailbox closed: PeerWatcher tells
			}
			v := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(x.msg)), uint32(m.o.rank))
			if err := m.o.c.Set(m.ctx, m.key(x.from, strconv.FormatInt(k, 10)), append(v, x.msg...)); err != nil {
				return
			}
		}
		select {
		case <-m.kick:
		case <-m.ctx.Done():
			return
		}
	}
}

// Gone never blocks: it answers what the store said, and asks it in the background.
// A closing team leaves a mark in the store (Close, CloseLeaving). Gone asked about a
// peer whose mark is not known nudges the team goneFirst later (an empty delivery
// from the peer, Mailbox.Listen), on which the transport asks again only if its link
// to the peer is still being made; asked then, Gone looks for the mark in the store,
// and goes on looking at most every goneMax while it is asked, each look ending with
// a nudge. So a peer that closed before it read a hello is found within about
// goneMax, not at the connect's bound (30 s) or the collective's deadline, and a link
// that comes up within goneFirst costs the store nothing. A peer whose process died
// is the PeerWatcher's.
func (m *tcpMailbox) Gone(peer int) error {
	if peer < 0 || peer >= m.o.size || peer == m.o.rank {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	if m.gone == nil {
		m.gone = map[int]*peerMark{}
	}
	pm := m.gone[peer]
	now := time.Now()
	if pm == nil {
		pm = &peerMark{}
		m.gone[peer] = pm
	}
	if pm.err != nil {
		return pm.err
	}
	last := pm.last
	pm.last = now
	if pm.timer {
		return nil
	}
	if now.Sub(last) > 2*goneMax {
		// Not asked for a while: a new link to the peer, which may come up at once.
		pm.since, pm.wait, pm.next = now, goneFirst, time.Time{}
	}
	at, look := pm.since.Add(goneFirst), false
	if !now.Before(at) {
		at, look = pm.next, true
	}
	pm.timer = true
	m.asking.Add(1)
	go m.look(peer, pm, time.Until(at), look)
	return nil
}

// look waits d, looks for peer's closed mark if asked to, records it, and nudges the
// team (an empty delivery from peer) so that it asks Gone again where it still waits.
func (m *tcpMailbox) look(peer int, pm *peerMark, d time.Duration, look bool) {
	defer m.asking.Done()
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-m.ctx.Done():
			return
		}
	}
	var v []byte
	var ok bool
	var err error
	if look {
		key := m.key(peer, closedKey)
		ok, err = m.o.c.Check(m.ctx, key)
		if err == nil && ok {
			v, err = m.o.c.Get(m.ctx, key)
		}
	}
	m.mu.Lock()
	pm.timer = false
	if look {
		pm.next = time.Now().Add(pm.wait)
		pm.wait = min(2*pm.wait, goneMax)
		if err == nil && ok {
			pm.err = m.decodeMark(peer, v)
		}
	}
	recv := m.recv
	closed := m.closed
	m.mu.Unlock()
	if recv != nil && !closed && err == nil {
		m.deliverNews(recv, peer)
	}
}

// deliverNews hands recv the empty message that says "ask Gone(peer)", unless the
// mailbox closed meanwhile.
func (m *tcpMailbox) deliverNews(recv func(int, []byte), peer int) {
	select {
	case <-m.ctx.Done():
	default:
		recv(peer, nil)
	}
}

func (m *tcpMailbox) decodeMark(peer int, v []byte) error {
	if len(v) >= 9 && v[0] == 1 {
		return &LeftError{Rank: peer, From: binary.LittleEndian.Uint64(v[1:9]), Why: string(v[9:]), Via: "TCPOOB"}
	}
	why := ""
	if len(v) > 9 {
		why = string(v[9:])
	}
	return fmt.Errorf("coll: TCPOOB: rank %d's team closed its mailbox (%s): %w", peer, why, ErrClosed)
}

func (m *tcpMailbox) Listen(recv func(from int, msg []byte)) {
	m.mu.Lock()
	if m.recvd != nil || m.closed {
		m.mu.Unlock()
		return
	}
	m.recvd = make(chan struct{})
	m.recv = recv
	m.mu.Unlock()
	go func() {
		defer close(m.recvd)
		for k := 1; ; k++ {
			key := m.key(m.o.rank, strconv.Itoa(k))
			v, err := m.o.c.Get(m.ctx, key)
			if err != nil {
				return
			}
			_, _ = m.o.c.Delete(m.ctx, key)
			if len(v) < 4 {
				continue
			}
			from := int(binary.LittleEndian.Uint32(v))
			if from < 0 || from >= m.o.size || from == m.o.rank {
				continue
			}
			recv(from, v[4:])
		}
	}()
}

func (m *tcpMailbox) Close(why string) { m.close(why, false, 0) }

// CloseLeaving closes the mailbox leaving the closing rank's bound in its mark
// (LeavingCloser), which peers that look for it find.
func (m *tcpMailbox) CloseLeaving(from uint64, why string) { m.close(why, true, from) }

func (m *tcpMailbox) close(why string, bounded bool, from uint64) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	recvd := m.recvd
	m.mu.Unlock()
	// The mark: a peer still connecting to this rank finds it (Gone) instead of
	// waiting for its bound. Best effort, and bounded: the store may be gone.
	mark := make([]byte, 9, 9+len(why))
	if bounded {
		mark[0] = 1
		binary.LittleEndian.PutUint64(mark[1:], from)
	}
	if room := m.o.c.MaxValueSize() - len(mark); len(why) > room {
		why = why[:max(room, 0)]
	}
	mark = append(mark, why...)
	ctx, cancel := context.WithTimeout(context.Background(), closeMarkBound)
	_ = m.o.c.Set(ctx, m.key(m.o.rank, closedKey), mark)
	cancel()
	m.cancel()
	<-m.sent
	if recvd != nil {
		<-recvd
	}
	m.asking.Wait()
}
