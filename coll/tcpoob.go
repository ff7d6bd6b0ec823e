package coll

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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
}

func (o *tcpOOB) Rank() int { return o.rank }
func (o *tcpOOB) Size() int { return o.size }

func (o *tcpOOB) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	return o.c.Allgather(ctx, o.rank, o.size, o.name, data)
}

// WatchPeers makes the store tell the team when a rank's process dies: every rank
// leaves a will with the store under bootstrap.DiedKey that names it (bootstrap.Connect
// already did; doing it again changes nothing), and blocks on that key. A process that
// exits or is killed without closing its client drops its connection, the store sets
// the key, and every other rank learns who died within a round trip. A rank that loses
// its own connection to the store (the process serving it, rank 0 unless the store is
// external, died; or the network failed) reports rank 0. The key stays set: a store
// serves one job.
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
		case wctx.Err() != nil:
		case errors.Is(err, bootstrap.ErrClosed):
			// This rank closed its own client: not a peer's death.
		default:
			died(0, fmt.Sprintf("this rank lost the store (%v): the process serving it (rank 0, unless the store is external) died, or the network failed", err))
		}
	}()
	return func() {
		cancel()
		<-done
	}, nil
}
