package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCloseWithdrawsAgainstRaces: a client that closes sets none of its wills, even
// when a second Close and a Will race the first Close. Before, the second Close dropped
// the connection while the first still withdrew, and a Will that Close overtook was
// left with the server: either way the store announced a clean close as a death.
func TestCloseWithdrawsAgainstRaces(t *testing.T) {
	s := newServer(t, ServerOptions{})
	obs := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 60*time.Second)
	for it := range 30 {
		c := dial(t, s, ClientOptions{})
		before := fmt.Sprintf("races/%d/before", it)
		during := fmt.Sprintf("races/%d/during", it)
		require.NoError(t, c.Will(ctx, before, []byte("x")))
		var wg sync.WaitGroup
		var willErr error
		wg.Add(3)
		go func() {
			defer wg.Done()
			// Spread the Will over the Closes' steps.
			time.Sleep(time.Duration(it%5) * 20 * time.Microsecond)
			willErr = c.Will(context.Background(), during, []byte("x"))
		}()
		for range 2 {
			go func() {
				defer wg.Done()
				require.NoError(t, c.Close())
			}()
		}
		wg.Wait()
		if willErr != nil {
			require.True(t, errors.Is(willErr, ErrClosed), "iteration %d: the racing Will failed otherwise: %v", it, willErr)
		}
		noWillsSet(t, ctx, s, obs, fmt.Sprintf("iteration %d (the racing Will returned %v)", it, willErr), before, during)
	}
}

// TestWillAndWithdrawalRace: a will and its withdrawal in flight together end in some
// order at the server; whichever it is, Close leaves no will set. Before, the client
// could record the withdrawal last while the server took the will last (83 of 200).
func TestWillAndWithdrawalRace(t *testing.T) {
	s := newServer(t, ServerOptions{})
	obs := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 60*time.Second)
	for it := range 100 {
		c := dial(t, s, ClientOptions{})
		key := fmt.Sprintf("both/%d", it)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); require.NoError(t, c.Will(ctx, key, []byte("x"))) }()
		go func() { defer wg.Done(); require.NoError(t, c.Will(ctx, key, nil)) }()
		wg.Wait()
		require.NoError(t, c.Close())
		noWillsSet(t, ctx, s, obs, fmt.Sprintf("iteration %d", it), key)
	}
}

// TestCloseDoesNotWaitForSlots: a Will waiting for a request slot that blocked Gets
// hold gives up when Close begins, and Close withdraws the client's wills through the
// keepalive's slot: it no longer waited willWithdrawTimeout for either.
func TestCloseDoesNotWaitForSlots(t *testing.T) {
	s := newServer(t, ServerOptions{})
	obs := dial(t, s, ClientOptions{})
	ctx := testCtx(t, 30*time.Second)
	c := dial(t, s, ClientOptions{MaxInflight: 1})
	require.NoError(t, c.Will(ctx, "slots/before", []byte("x")))
	go func() { _, _ = c.Get(context.Background(), "slots/never") }() // holds the one slot
	eventually(t, 5*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending) == 1
	}, "the Get holds the slot")
	willErr := make(chan error, 1)
	go func() { willErr <- c.Will(context.Background(), "slots/waiting", []byte("x")) }()
	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	require.ErrorIs(t, <-willErr, ErrClosed)
	require.Less(t, took, willWithdrawTimeout, "Close waited out its bound")
	noWillsSet(t, ctx, s, obs, "", "slots/before", "slots/waiting")
}

// TestRefusedWillsNotKept: wills the server refuses (past MaxWills) are not kept for
// Close to withdraw one by one.
func TestRefusedWillsNotKept(t *testing.T) {
	s := newServer(t, ServerOptions{})
	ctx := testCtx(t, 30*time.Second)
	c := dial(t, s, ClientOptions{})
	refused := 0
	for i := range MaxWills + 20 {
		if err := c.Will(ctx, fmt.Sprintf("many/%d", i), []byte("x")); err != nil {
			refused++
		}
	}
	require.Equal(t, 20, refused)
	c.willMu.Lock()
	kept := len(c.wills)
	c.willMu.Unlock()
	require.Equal(t, MaxWills, kept)
	require.NoError(t, c.Close())
}

// noWillsSet waits until the server holds only obs's connection (it has seen the
// others end, and fired what it would fire), then requires that none of keys is set.
func noWillsSet(t *testing.T, ctx context.Context, s *Server, obs *Client, why string, keys ...string) {
	t.Helper()
	onlyConns(t, s, 1)
	for _, k := range keys {
		ok, err := obs.Check(ctx, k)
		require.NoError(t, err)
		require.False(t, ok, "%s: the will %s of a client that closed was set", why, k)
	}
}

// onlyConns waits until the server holds n connections: the others' ends are seen,
// and what the server fires for them has been fired.
func onlyConns(t *testing.T, s *Server, n int) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		s.cmu.Lock()
		defer s.cmu.Unlock()
		return len(s.conns) == n
	}, fmt.Sprintf("%d connection(s) left", n))
}
