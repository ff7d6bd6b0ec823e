package coll

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A TCPOOB mailbox cannot refuse a message at once, as LocalOOB's does: a message to
// a rank whose team closed waits in the store unread. So a closing mailbox leaves a
// mark, and a rank whose link to a peer waits looks for the peer's.
//
// The mark is "NAME/mb/CH/R/closed": a flag byte (1: the closing rank's bound
// follows), the bound (8 bytes), and why (at most markWhy bytes). Each closing rank
// then adds one to the team's count of closed mailboxes, "NAME/mb/CH/closed".
//
// Gone, asked about a peer by a link still being made (tlmlx5 asks at the link's first
// poll, then every goneAsk, and at once on the mailbox's news), starts the mailbox's
// looker unless it runs. The looker waits goneFirst and nudges the team (an empty
// delivery: Mailbox.Listen, driver.Lazy.Message): its waiter polls, and the links
// still being made ask Gone again. Peers not asked again by the next round have their
// links up, and are forgotten. While any is left, each round reads the count (one
// store call), and looks for the mark of each waiting peer only where the count moved
// since that peer's mark was last missing. A peer found closed is nudged, and its
// link is refused at the transport's next Gone. The first two rounds are goneFirst
// apart, then the wait doubles up to goneMax.
//
// So a link that comes up within goneFirst costs the store nothing, waiting links one
// call per round for their whole mailbox, and a peer that closed before it read a
// hello is found within about goneMax, not at the connect's bound (30 s) or the
// collective's deadline. The marks and the count stay in the store: n+1 small keys
// per team (beside the mailboxes' own counters). A peer whose process died is the
// PeerWatcher's.

// tcpGone is what a mailbox knows of closed peers; under tcpMailbox.mu.
type tcpGone struct {
	marks   map[int]error        // peers found closed: their refusal
	waiting map[int]*waitingPeer // peers asked about and not found closed
	looking bool                 // the looker runs
	nudges  uint64               // the looker's nudges so far
	asking  sync.WaitGroup       // the looker, for Close
}

// waitingPeer is a peer whose link waits, as far as this mailbox knows.
type waitingPeer struct {
	asked uint64 // the looker's nudge count at the latest Gone about it
	seen  int64  // the team's count of closed mailboxes when its mark was last missing
}

const (
	closedKey = "closed" // a rank's mark, and (at the team's level) the count
	markWhy   = 200      // why, in a mark, at most (as tlmlx5's own messages)
)

// goneFirst is how long a link waits before the store is looked at; goneMax the
// longest between looks. closeMarkBound bounds the mark's Set at Close: a store that
// no longer answers must not hold the team's Close.
var (
	goneFirst      = 100 * time.Millisecond
	goneMax        = time.Second
	closeMarkBound = 2 * time.Second
)

// markLooks counts the marks looked for, process-wide (tests: none while nobody closed).
var markLooks atomic.Int64

func (m *tcpMailbox) countKey() string { return m.prefix + closedKey }

// Gone never blocks: it answers what the looker found, and starts it if it is idle.
func (m *tcpMailbox) Gone(peer int) error {
	if peer < 0 || peer >= m.o.size || peer == m.o.rank {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g := &m.gone
	if err := g.marks[peer]; err != nil {
		return err
	}
	if m.closed {
		return nil
	}
	if g.waiting == nil {
		g.waiting = map[int]*waitingPeer{}
	}
	// No clock here: it is asked for every link still being made, often.
	if w := g.waiting[peer]; w != nil {
		w.asked = g.nudges
	} else {
		g.waiting[peer] = &waitingPeer{asked: g.nudges}
	}
	if !g.looking {
		g.looking = true
		g.asking.Add(1)
		go m.looker()
	}
	return nil
}

// looker runs the rounds described above until no link waits or the mailbox closes.
func (m *tcpMailbox) looker() {
	defer m.gone.asking.Done()
	wait := goneFirst
	for round := 0; ; round++ {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-m.ctx.Done():
			t.Stop()
			return
		}
		if round > 0 {
			wait = min(2*wait, goneMax)
		}
		m.mu.Lock()
		for p, w := range m.gone.waiting {
			if round > 0 && w.asked < m.gone.nudges {
				delete(m.gone.waiting, p)
			}
		}
		if len(m.gone.waiting) == 0 || m.closed {
			m.gone.looking = false
			m.mu.Unlock()
			return
		}
		peers := make([]int, 0, len(m.gone.waiting))
		for p := range m.gone.waiting {
			peers = append(peers, p)
		}
		m.mu.Unlock()
		var found []int
		if round > 0 {
			found = m.lookMarks(peers)
		}
		m.mu.Lock()
		m.gone.nudges++ // a peer asked about after this nudge is still waiting
		recv, closed := m.recv, m.closed
		m.mu.Unlock()
		if recv == nil || closed {
			continue
		}
		// The found peers, so that their links are refused; else one waiting peer, to
		// wake the waiter, whose poll asks Gone for every link still being made.
		if len(found) == 0 {
			found = peers[:1]
		}
		for _, p := range found {
			select {
			case <-m.ctx.Done():
				return
			default:
				recv(p, nil)
			}
		}
	}
}

// lookMarks reads the team's count of closed mailboxes and, for each of peers that
// was last found open at another count, its mark. It returns the peers found closed.
func (m *tcpMailbox) lookMarks(peers []int) []int {
	n, err := m.o.c.Add(m.ctx, m.countKey(), 0)
	if err != nil {
		return nil
	}
	var found []int
	for _, p := range peers {
		m.mu.Lock()
		w := m.gone.waiting[p]
		stale := w != nil && w.seen != n
		m.mu.Unlock()
		if !stale {
			continue
		}
		key := m.key(p, closedKey)
		markLooks.Add(1)
		ok, err := m.o.c.Check(m.ctx, key)
		var v []byte
		if err == nil && ok {
			v, err = m.o.c.Get(m.ctx, key)
		}
		if err != nil {
			return found // the rest at the next round
		}
		m.mu.Lock()
		if ok {
			if m.gone.marks == nil {
				m.gone.marks = map[int]error{}
			}
			m.gone.marks[p] = decodeMark(p, v)
			delete(m.gone.waiting, p)
			found = append(found, p)
		} else if w := m.gone.waiting[p]; w != nil {
			w.seen = n
		}
		m.mu.Unlock()
	}
	return found
}

func decodeMark(peer int, v []byte) error {
	why := ""
	if len(v) > 9 {
		why = string(v[9:])
	}
	if len(v) >= 9 && v[0] == 1 {
		return &LeftError{Rank: peer, From: binary.LittleEndian.Uint64(v[1:9]), Why: why, Via: "TCPOOB"}
	}
	return fmt.Errorf("coll: TCPOOB: rank %d's team closed its mailbox (%s): %w", peer, why, ErrClosed)
}

// leaveMark leaves this rank's mark and counts it, best effort and bounded: the store
// may be gone (then the PeerWatcher tells the peers instead).
func (m *tcpMailbox) leaveMark(why string, bounded bool, from uint64) {
	select {
	case <-m.o.c.Done():
		return
	default:
	}
	mark := make([]byte, 9, 9+min(len(why), markWhy))
	if bounded {
		mark[0] = 1
		binary.LittleEndian.PutUint64(mark[1:], from)
	}
	mark = append(mark, why[:min(len(why), markWhy)]...)
	ctx, cancel := context.WithTimeout(context.Background(), closeMarkBound)
	defer cancel()
	if m.o.c.Set(ctx, m.key(m.o.rank, closedKey), mark) == nil {
		_, _ = m.o.c.Add(ctx, m.countKey(), 1)
	}
}
