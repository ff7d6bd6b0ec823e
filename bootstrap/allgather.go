package bootstrap

import (
	"context"
	"fmt"
	"strconv"
)

// Keys under this prefix belong to Allgather and Barrier.
const reservedPrefix = "ibcoll/"

// Allgather gives every rank of a team of size ranks the data of all: the
// result's element i is rank i's data (a copy, also for this rank).
// Every rank of the team calls it with the same name, and calls the
// allgathers of one name in the same order: each call is a new round of
// its name, counted by this client. It blocks until all ranks have
// contributed or ctx ends. After an error the round counters of the team
// may disagree, and the name must not be used again.
//
// Round k of NAME uses the keys "ibcoll/ag/NAME/k/...": rank r sets its
// data under ".../k/r" and adds 1 to ".../k/count"; the rank that brings
// the count to size sets ".../k/done", which the others wait for, so the
// server holds one waiter per rank, not one per pair. Every rank then
// gets the data of all. Once a rank has finished round k, every rank has
// finished round k-1 (it set its key of round k after that), so each rank
// deletes its own data of round k-1, and the last arrival of round k
// deletes the count of k and the done key of k-1: a name holds at most
// two rounds of keys.
//
// Calls of one name must not overlap on a client. Calls of different
// names may: a blocked allgather holds one of the client's in-flight
// slots.
func (c *Client) Allgather(ctx context.Context, rank, size int, name string, data []byte) ([][]byte, error) {
	if err := c.usable(ctx, "allgather"); err != nil {
		return nil, err
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("bootstrap: allgather %q: %w: rank %d of %d", name, ErrInvalid, rank, size)
	}
	if len(data) > c.lim.maxValue {
		return nil, fmt.Errorf("bootstrap: allgather %q: %w: %d bytes (limit %d)", name, ErrTooLarge, len(data), c.lim.maxValue)
	}
	prefix := reservedPrefix + "ag/" + name + "/"
	c.agMu.Lock()
	round := c.rounds[name]
	c.rounds[name] = round + 1
	c.agMu.Unlock()
	fail := func(err error) ([][]byte, error) {
		return nil, fmt.Errorf("bootstrap: allgather %q round %d (rank %d of %d): %w", name, round, rank, size, err)
	}
	key := func(round uint64, what string) string {
		return prefix + strconv.FormatUint(round, 10) + "/" + what
	}
	dataKey := func(round uint64, i int) string { return key(round, strconv.Itoa(i)) }
	if err := checkKey(dataKey(round, size-1)); err != nil {
		return fail(err)
	}
	if size == 1 {
		return [][]byte{append(make([]byte, 0, len(data)), data...)}, nil
	}

	if err := c.Set(ctx, dataKey(round, rank), data); err != nil {
		return fail(err)
	}
	n, err := c.Add(ctx, key(round, "count"), 1)
	if err != nil {
		return fail(err)
	}
	switch {
	case n == int64(size):
		if err := c.Set(ctx, key(round, "done"), nil); err != nil {
			return fail(err)
		}
		if _, err := c.Delete(ctx, key(round, "count")); err != nil {
			return fail(err)
		}
		if round > 0 {
			if _, err := c.Delete(ctx, key(round-1, "done")); err != nil {
				return fail(err)
			}
		}
	case n < int64(size):
		if err := c.Wait(ctx, key(round, "done")); err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("bootstrap: %w: %d arrivals for %d ranks: ranks disagree on the size, or the store holds an earlier job's keys", ErrInvalid, n, size))
	}

	// Every key exists now: all Gets go out before any answer is awaited.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([][]byte, size)
	calls := make([]*call, size)
	for i := 0; i < size && err == nil; i++ {
		if i != rank {
			calls[i], err = c.start(ctx, &request{op: opGet, key: dataKey(round, i)}, c.sem, true)
		}
	}
	if err != nil {
		cancel()
	}
	for i, cl := range calls {
		if cl == nil {
			continue
		}
		r, e := c.await(ctx, cl)
		if e != nil {
			if err == nil {
				err = fmt.Errorf("rank %d: %w", i, e)
			}
			cancel()
			continue
		}
		out[i] = r.value
	}
	if err != nil {
		return fail(err)
	}
	out[rank] = append(make([]byte, 0, len(data)), data...)
	if round > 0 {
		if _, err := c.Delete(ctx, dataKey(round-1, rank)); err != nil {
			return fail(err)
		}
	}
	return out, nil
}

// Barrier returns once n callers have entered the barrier called name, or
// ctx ends. It is reusable: the k-th entry overall belongs to generation
// (k-1)/n, so each of the n ranks must enter once per generation (call
// it in the same order everywhere, never twice at once from one rank).
//
// It is an Add on "ibcoll/barrier/NAME/count" and a Wait on the key that
// the generation's last entrant sets; that entrant also deletes the key
// of the generation before, which everyone has passed.
func (c *Client) Barrier(ctx context.Context, name string, n int) error {
	if err := c.usable(ctx, "barrier"); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("bootstrap: barrier %q: %w: %d ranks", name, ErrInvalid, n)
	}
	prefix := reservedPrefix + "barrier/" + name + "/"
	k, err := c.Add(ctx, prefix+"count", 1)
	if err != nil {
		return fmt.Errorf("bootstrap: barrier %q: %w", name, err)
	}
	gen := (k - 1) / int64(n)
	done := func(g int64) string { return prefix + strconv.FormatInt(g, 10) }
	if k%int64(n) == 0 {
		if err := c.Set(ctx, done(gen), nil); err != nil {
			return fmt.Errorf("bootstrap: barrier %q: %w", name, err)
		}
		if gen > 0 {
			if _, err := c.Delete(ctx, done(gen-1)); err != nil {
				return fmt.Errorf("bootstrap: barrier %q: %w", name, err)
			}
		}
		return nil
	}
	if err := c.Wait(ctx, done(gen)); err != nil {
		return fmt.Errorf("bootstrap: barrier %q generation %d: %w", name, gen, err)
	}
	return nil
}
