package bootstrap

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWillFiresOnDrop: a client's will is set when its connection ends, and
// wakes a Get blocked on it in another client; a withdrawn will is not set;
// a will on a live client stays unset.
func TestWillFiresOnDrop(t *testing.T) {
	s := newServer(t, ServerOptions{})
	ctx := testCtx(t, 10*time.Second)
	watcher := dial(t, s, ClientOptions{})
	dying := dial(t, s, ClientOptions{})
	leaving := dial(t, s, ClientOptions{})
	living := dial(t, s, ClientOptions{})

	require.NoError(t, dying.Will(ctx, "job/failed", []byte("rank 3")))
	require.NoError(t, leaving.Will(ctx, "job/left", []byte("rank 4")))
	require.NoError(t, leaving.Will(ctx, "job/left", nil), "withdraw")
	require.NoError(t, living.Will(ctx, "job/alive", []byte("rank 5")))

	got := make(chan []byte, 1)
	go func() {
		v, err := watcher.Get(ctx, "job/failed")
		if err != nil {
			v = []byte(err.Error())
		}
		got <- v
	}()
	// Without a clean withdrawal, a dropped connection is a dead process.
	require.NoError(t, dying.nc.Close())
	select {
	case v := <-got:
		require.Equal(t, "rank 3", string(v))
	case <-ctx.Done():
		t.Fatal("the will of a dropped connection was not set")
	}
	require.NoError(t, leaving.Close())
	eventually(t, 5*time.Second, func() bool {
		s.cmu.Lock()
		defer s.cmu.Unlock()
		return len(s.conns) == 2
	}, "only the watcher's and the living client's connections left")
	ok, err := watcher.Check(ctx, "job/left")
	require.NoError(t, err)
	require.False(t, ok, "a withdrawn will is not set")
	ok, err = watcher.Check(ctx, "job/alive")
	require.NoError(t, err)
	require.False(t, ok, "a live client's will is not set")
}

// TestWillLimitsAndArguments: bad keys and too many wills are refused with
// typed errors; the connection stays usable.
func TestWillLimitsAndArguments(t *testing.T) {
	s := newServer(t, ServerOptions{})
	ctx := testCtx(t, 10*time.Second)
	c := dial(t, s, ClientOptions{})
	require.ErrorIs(t, c.Will(ctx, "", []byte("x")), ErrInvalid)
	for i := 0; i < MaxWills; i++ {
		require.NoError(t, c.Will(ctx, fmt.Sprintf("w/%d", i), []byte("x")))
	}
	require.NoError(t, c.Will(ctx, "w/0", []byte("replaced")), "replacing a will is not one more")
	require.ErrorIs(t, c.Will(ctx, "w/extra", []byte("x")), ErrStoreFull)
	require.NoError(t, c.Ping(ctx))
}

// TestServerCloseSetsNoWills: a server that closes ends every connection, which is
// no client's death: it sets none of their wills, so no waiter can take a living
// rank for a dead one. Close returns once the connections' goroutines, which set the
// wills of connections that drop, are done.
func TestServerCloseSetsNoWills(t *testing.T) {
	s := newServer(t, ServerOptions{})
	ctx := testCtx(t, 10*time.Second)
	c := dial(t, s, ClientOptions{})
	require.NoError(t, c.Will(ctx, "job/failed", []byte("rank 1")))
	require.NoError(t, s.Close())
	s.mu.Lock()
	v, set := s.data["job/failed"]
	s.mu.Unlock()
	require.False(t, set, "will set to %q by the server's own Close", v)
}
