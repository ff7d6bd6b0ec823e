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
		// The server has seen the connection end (and fired what it would fire).
		eventually(t, 5*time.Second, func() bool {
			s.cmu.Lock()
			defer s.cmu.Unlock()
			return len(s.conns) == 1
		}, "only the observer's connection left")
		for _, k := range []string{before, during} {
			ok, err := obs.Check(ctx, k)
			require.NoError(t, err)
			require.False(t, ok, "iteration %d: the will %s of a client that closed was set (the racing Will returned %v)", it, k, willErr)
		}
	}
}
