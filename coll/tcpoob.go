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
	return TCPOOBNamed(c, defaultOOB, rank, size)
}

// defaultOOB is TCPOOB's name.
const defaultOOB = "ibcoll/oob"

// TCPOOBNamed is TCPOOB with its own key space, so that several OOBs
// (one per team) can share a store client. Every rank must use the same name.
// Deaths are told in the job's numbering (WatchPeers): an OOB over a subset of the
// processes, numbered otherwise, hears of a death under the wrong rank, and its team
// would cut off a live member; use it with the job's ranks.
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
// already did; doing it again changes nothing), and blocks on that key. The key names
// ranks as the job's processes are numbered (Connect's wills, set before any team
// exists, so that a process that dies before it joins is noticed too): an OOB whose
// ranks are numbered otherwise (TCPOOBNamed over a subset of the processes) would
// misread it, and must not watch (a limit: see TCPOOBNamed). A process that
// exits or is killed without closing its client drops its connection, the store sets
// the key, and every other rank learns who died within a round trip. A rank that loses
// its own connection to the store (the process serving it, rank 0 unless the store is
// external, died; or the network failed) reports rank 0, after a first death too: the
// key holds one name, and the job's launcher often ends the store's process next, which
// a rank still waiting on it must hear of. The key stays set: a store serves one job.
// The teams of one client share one blocked Get of the key (diedWatch), so that they
// do not each hold one of the client's request slots for their whole life.
func (o *tcpOOB) WatchPeers(ctx context.Context, died func(rank int, cause string)) (func(), error) {
	if err := o.c.Will(ctx, bootstrap.DiedKey, []byte(strconv.Itoa(o.rank))); err != nil {
		return nil, fmt.Errorf("coll: TCPOOB: watching peers: %w", err)
	}
	w := watchDied(o.c)
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-w.fired:
		case <-wctx.Done():
			return
		}
		v, err := w.v, w.err
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
		case errors.Is(err, bootstrap.ErrClosed):
			// This rank closed its own client: not a peer's death.
		default:
			died(0, lostStore(err))
		}
	}()
	return func() {
		cancel()
		<-done
		w.release()
	}, nil
}

// diedWatch is one client's blocked Get of bootstrap.DiedKey, shared by the teams
// that watch through that client; it ends when the last of them stops watching
// before the key is set.
type diedWatch struct {
	c      *bootstrap.Client
	users  int // under diedWatches.mu
	cancel context.CancelFunc
	fired  chan struct{} // closed once the Get ended; then v and err hold its outcome
	v      []byte
	err    error
}

// diedWatches holds the live watch of each client.
var diedWatches struct {
	mu sync.Mutex
	m  map[*bootstrap.Client]*diedWatch
}

// watchDied returns c's watch, starting it if none runs, with one more user.
func watchDied(c *bootstrap.Client) *diedWatch {
	diedWatches.mu.Lock()
	defer diedWatches.mu.Unlock()
	if w := diedWatches.m[c]; w != nil {
		w.users++
		return w
	}
	if diedWatches.m == nil {
		diedWatches.m = make(map[*bootstrap.Client]*diedWatch)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &diedWatch{c: c, users: 1, cancel: cancel, fired: make(chan struct{})}
	diedWatches.m[c] = w
	go func() {
		w.v, w.err = c.Get(ctx, bootstrap.DiedKey)
		close(w.fired)
	}()
	return w
}

// release drops one user. The last one ends the watch, and takes it out of the
// registry, so that a later team starts another (a key already set answers at once).
func (w *diedWatch) release() {
	diedWatches.mu.Lock()
	defer diedWatches.mu.Unlock()
	if w.users--; w.users > 0 {
		return
	}
	if diedWatches.m[w.c] == w {
		delete(diedWatches.m, w.c)
	}
	w.cancel()
}

// storeLost says what a lost connection to the store most likely means.
const storeLost = "the process serving it (rank 0, unless the store is external) died, or the network failed"

func lostStore(err error) string {
	return fmt.Sprintf("this rank lost the store (%v): %s", err, storeLost)
}

// Mailbox opens the next team's mailbox in the store (see Messenger). Rank r's
// mailbox of team channel ch is a queue of keys: a sender takes a number from the
// counter "NAME/mb/CH/R/n" (Add) and sets the message under "NAME/mb/CH/R/K"; the
// receiver gets keys 1, 2, ... in turn (a blocking Get) and deletes each it read (a
// slot taken and never set is a hole, which the receiver passes over: see next). One
// goroutine sends (Send queues for it and never blocks) and one receives; Close ends
// both. A message to a rank whose team closed stays in the store unread; Close leaves
// a mark under "NAME/mb/CH/R/closed" (with the closing rank's bound where the team gave
// it, CloseLeaving), which a sender whose link waits finds through Gone.
//
// Each open mailbox holds one of the client's request slots (bootstrap.Client.Slots)
// with its blocked Get, so a client carries at most Slots less boxReserve teams at
// once; past that Mailbox fails with ErrBusy, rather than the client's other requests
// waiting for a slot that teams keep taking back.
func (o *tcpOOB) Mailbox() (Mailbox, error) {
	o.mu.Lock()
	ch := o.boxes
	o.boxes++ // taken even when refused below: every rank's next team keeps the same channel
	o.mu.Unlock()
	if err := takeBox(o.c); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &tcpMailbox{o: o, prefix: o.name + "/mb/" + strconv.Itoa(ch) + "/", ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1), sent: make(chan struct{})}
	go m.sendLoop()
	return m, nil
}

// boxReserve is the request slots of a client that mailboxes leave to other
// requests: the shared death watch, team creation's allgathers, sends and looks (half
// of them, for a client given fewer than twice as many).
const boxReserve = 8

// boxes counts each client's open mailboxes.
var boxes struct {
	mu sync.Mutex
	n  map[*bootstrap.Client]int
}

func takeBox(c *bootstrap.Client) error {
	boxes.mu.Lock()
	defer boxes.mu.Unlock()
	reserve := min(boxReserve, (c.Slots()+1)/2)
	if boxes.n[c] >= c.Slots()-reserve {
		return fmt.Errorf("coll: TCPOOB: Mailbox: %w: %d teams are open on this store client, each holding one of its %d request slots (%d are kept for other requests); close a team, or give more teams their own client",
			ErrBusy, boxes.n[c], c.Slots(), reserve)
	}
	if boxes.n == nil {
		boxes.n = make(map[*bootstrap.Client]int)
	}
	boxes.n[c]++
	return nil
}

func putBox(c *bootstrap.Client) {
	boxes.mu.Lock()
	defer boxes.mu.Unlock()
	if boxes.n[c]--; boxes.n[c] <= 0 {
		delete(boxes.n, c)
	}
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
	gone   tcpGone // peers found closed, and the looking (tcpoob_gone.go)
}

func (m *tcpMailbox) key(rank int, what string) string {
	return m.prefix + strconv.Itoa(rank) + "/" + what
}

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
	if err := m.gone.marks[peer]; err != nil {
		m.mu.Unlock()
		return err
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
			if m.ctx.Err() != nil {
				return // closed: what is queued stays unsent
			}
			v := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+len(x.msg)), uint32(m.o.rank))
			if err := m.store(x.from, append(v, x.msg...)); err != nil {
				return // the store is gone: PeerWatcher tells
			}
		}
		select {
		case <-m.kick:
		case <-m.ctx.Done():
			return
		}
	}
}

// Holes in a mailbox. A sender takes a slot's number (Add), then sets the message in
// it; the receiver reads the slots in order, so a slot taken and never set would stop
// its mailbox for good, and every later message to it from any rank with it.
//   - A sender fills every slot it took, even if its mailbox closes meanwhile
//     (slotFill bounds that), and leaves a skip mark where the store refuses the
//     message (store).
//   - A rank that dies, or loses the store, between the two leaves a hole all the
//     same: the receiver passes over a slot that stays empty for holeGrace while a
//     later one is taken, looking every holeLook while it waits.
var (
	slotFill  = 5 * time.Second
	holeLook  = 5 * time.Second
	holeGrace = 15 * time.Second
)

// skipMark fills a slot whose message could not be stored: under 4 bytes, so the
// receiver passes over it.
var skipMark = []byte{0}

// store takes the next slot of peer's mailbox and sets the message v in it. Once the
// slot's number is asked for, neither waits for the mailbox's Close: an Add that
// reached the store took the slot, answered or not, and its slot must be filled.
func (m *tcpMailbox) store(peer int, v []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), slotFill)
	defer cancel()
	k, err := m.o.c.Add(ctx, m.key(peer, "n"), 1)
	if err != nil {
		return err
	}
	key := m.key(peer, strconv.FormatInt(k, 10))
	if err = m.o.c.Set(ctx, key, v); err != nil {
		_ = m.o.c.Set(ctx, key, skipMark)
	}
	return err
}

// next returns the value of slot k of this rank's mailbox, waiting for it, or nil
// for a hole (above): a later slot was taken (the counter, read by adding 0, is past
// k; so two holes in a row are passed over too).
func (m *tcpMailbox) next(k int) ([]byte, error) {
	key := m.key(m.o.rank, strconv.Itoa(k))
	var empty time.Time // since when slot k is empty and a later one taken
	for {
		ctx, cancel := context.WithTimeout(m.ctx, holeLook)
		v, err := m.o.c.Get(ctx, key)
		timedOut := ctx.Err() != nil && m.ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			return v, nil
		case !timedOut:
			return nil, err
		}
		taken, err := m.o.c.Add(m.ctx, m.key(m.o.rank, "n"), 0)
		switch {
		case err != nil:
			return nil, err
		case taken <= int64(k):
			empty = time.Time{}
		case empty.IsZero():
			empty = time.Now()
		case time.Since(empty) >= holeGrace:
			return nil, nil
		}
	}
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
			v, err := m.next(k)
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
	m.leaveMark(why, bounded, from)
	m.cancel()
	<-m.sent
	if recvd != nil {
		<-recvd
	}
	m.gone.asking.Wait()
	putBox(m.o.c)
}
