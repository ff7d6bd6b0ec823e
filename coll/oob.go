package coll

import (
	"context"
	"fmt"
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
	// WatchPeers starts watching. died is called at most once, from another goroutine,
	// with the rank whose process died and what was seen. stop ends the watch and
	// withdraws this rank's own notice, as a rank that leaves normally does; it waits
	// for the watch's goroutine, so died is not called after it returns.
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
}

type oobRound struct {
	data    [][]byte
	arrived int
	left    int // ranks that took the result or gave up; the round is dropped at n
	done    chan struct{}
}

type localOOB struct {
	hub   *oobHub
	rank  int
	round int
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
		r = &oobRound{data: make([][]byte, h.n), done: make(chan struct{})}
		h.rounds[m] = r
	}
	r.data[o.rank] = append([]byte(nil), data...)
	r.arrived++
	if r.arrived == h.n {
		close(r.done)
	}
	h.mu.Unlock()

	var err error
	select {
	case <-r.done:
	case <-ctx.Done():
		err = fmt.Errorf("coll: LocalOOB rank %d: allgather round %d: %w", o.rank, m, ctx.Err())
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
