package bootstrap

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/stretchr/testify/require"
)

// TestAllgatherManyClients runs 33 ranks, one client each, through rounds
// of allgathers of fresh random data on two names at once, and checks
// every result and that old rounds are cleaned up.
func TestAllgatherManyClients(t *testing.T) {
	t.Parallel()
	const size, rounds = 33, 12
	names := []string{"team-a", "team-b"}
	s := newServer(t, ServerOptions{})
	rng := testutil.Rand(t)
	// data[name][round][rank]
	data := make([][][][]byte, len(names))
	for n := range names {
		data[n] = make([][][]byte, rounds)
		for r := range rounds {
			data[n][r] = make([][]byte, size)
			for i := range size {
				b := make([]byte, rng.IntN(3000)) // empty contributions included
				testutil.Fill(rng, b)
				data[n][r][i] = b
			}
		}
	}
	ctx := testCtx(t, 60*time.Second)
	clients := make([]*Client, size)
	for i := range clients {
		clients[i] = dial(t, s, ClientOptions{})
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		for n, name := range names {
			wg.Go(func() {
				for r := range rounds {
					got, err := c.Allgather(ctx, i, size, name, data[n][r][i])
					if err != nil {
						t.Errorf("rank %d %s round %d: %v", i, name, r, err)
						return
					}
					if len(got) != size {
						t.Errorf("rank %d: %d results", i, len(got))
						return
					}
					for j := range size {
						if d := testutil.FirstDiff(data[n][r][j], got[j]); d >= 0 {
							t.Errorf("rank %d %s round %d: block of rank %d differs at %d", i, name, r, j, d)
							return
						}
					}
					// The result is the caller's: writing it harms nobody.
					for _, b := range got {
						for k := range b {
							b[k] ^= 0xff
						}
					}
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	keys, _, waiting := s.stats()
	require.Zero(t, waiting)
	require.Equal(t, len(names)*(size+1), keys, "only the last round's data and done keys stay")
}

// TestAllgatherFewSlots runs concurrent allgathers of two names on
// clients with two in-flight slots: a blocked allgather holds one slot, so
// the other name's Set still gets through.
func TestAllgatherFewSlots(t *testing.T) {
	t.Parallel()
	const size, rounds = 5, 10
	s := newServer(t, ServerOptions{MaxInflight: 3})
	ctx := testCtx(t, 30*time.Second)
	var wg sync.WaitGroup
	for i := range size {
		c := dial(t, s, ClientOptions{})
		for _, name := range []string{"x", "y"} {
			wg.Go(func() {
				for r := range rounds {
					got, err := c.Allgather(ctx, i, size, name, []byte(fmt.Sprint(name, r, i)))
					if err != nil {
						t.Errorf("rank %d %s round %d: %v", i, name, r, err)
						return
					}
					for j, b := range got {
						if string(b) != fmt.Sprint(name, r, j) {
							t.Errorf("rank %d %s round %d: block %d is %q", i, name, r, j, b)
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
}

func TestAllgatherEdges(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{})
	c := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 10*time.Second)

	got, err := c.Allgather(ctx, 0, 1, "solo", []byte("me"))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("me")}, got)

	for _, rs := range [][2]int{{-1, 2}, {2, 2}, {0, 0}} {
		_, err := c.Allgather(ctx, rs[0], rs[1], "bad", nil)
		require.ErrorIs(t, err, ErrInvalid, "rank %d of %d", rs[0], rs[1])
	}
	_, err = c.Allgather(ctx, 0, 2, string(make([]byte, MaxKeyLen)), nil)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = c.Allgather(ctx, 0, 2, "big", make([]byte, c.MaxValueSize()+1))
	require.ErrorIs(t, err, ErrTooLarge)

	// A missing rank: the allgather ends with ctx, and its Gets are
	// withdrawn from the server.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c.Allgather(short, 1, 4, "missing", []byte("x"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	eventually(t, 5*time.Second, func() bool { _, _, w := s.stats(); return w == 0 }, "waiters withdrawn")
}

func TestBarrier(t *testing.T) {
	t.Parallel()
	const n, gens = 8, 25
	s := newServer(t, ServerOptions{})
	ctx := testCtx(t, 60*time.Second)
	var arrived [gens]atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		c := dial(t, s, ClientOptions{})
		wg.Go(func() {
			for g := range gens {
				if i == g%n {
					time.Sleep(time.Millisecond) // a different straggler each time
				}
				arrived[g].Add(1)
				if err := c.Barrier(ctx, "b", n); err != nil {
					t.Errorf("rank %d gen %d: %v", i, g, err)
					return
				}
				if a := arrived[g].Load(); a != n {
					t.Errorf("rank %d left generation %d with %d of %d arrived", i, g, a, n)
					return
				}
			}
		})
	}
	wg.Wait()
	keys, _, waiting := s.stats()
	require.Zero(t, waiting)
	require.LessOrEqual(t, keys, 2, "the counter and the last generation's key")

	c := dial(t, s, ClientOptions{})
	require.ErrorIs(t, c.Barrier(ctx, "x", 0), ErrInvalid)
	require.NoError(t, c.Barrier(ctx, "one", 1))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := c.Barrier(short, "two", 2)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, fmt.Sprintf("barrier %q generation 0", "two"))
}
