package coll

import (
	"context"

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
