package bootstrap

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/stretchr/testify/require"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// TestConnect runs a team the way a launcher starts one: the other ranks
// come up before rank 0, which serves the store on all interfaces at the
// port of the address they all got.
func TestConnect(t *testing.T) {
	t.Parallel()
	const size = 4
	store := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx := testCtx(t, 30*time.Second)
	rng := testutil.Rand(t)
	data := make([][]byte, size)
	for i := range data {
		data[i] = make([]byte, 64+i)
		testutil.Fill(rng, data[i])
	}

	var wg sync.WaitGroup
	servers := make(chan *Server, size)
	for rank := size - 1; rank >= 0; rank-- {
		if rank == 0 {
			time.Sleep(200 * time.Millisecond)
		}
		wg.Go(func() {
			env := Env{Rank: rank, Size: size, Store: store, Source: SourceIBColl}
			c, srv, err := Connect(ctx, env, ConnectOptions{})
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				return
			}
			defer c.Close()
			if (srv != nil) != (rank == 0) {
				t.Errorf("rank %d: server %v", rank, srv)
			}
			servers <- srv
			got, err := c.Allgather(ctx, rank, size, "oob", data[rank])
			if err != nil {
				t.Errorf("rank %d: %v", rank, err)
				return
			}
			for j := range size {
				if d := testutil.FirstDiff(data[j], got[j]); d >= 0 {
					t.Errorf("rank %d: block %d differs at %d", rank, j, d)
				}
			}
			// Everyone is done with the store before rank 0 closes it.
			if err := c.Barrier(ctx, "end", size); err != nil {
				t.Errorf("rank %d: %v", rank, err)
			}
		})
	}
	wg.Wait()
	close(servers)
	for srv := range servers {
		require.NoError(t, srv.Close())
	}
}

func TestConnectExternal(t *testing.T) {
	t.Parallel()
	s := newServer(t, ServerOptions{Token: "t"})
	ctx := testCtx(t, 10*time.Second)
	opts := ConnectOptions{Client: ClientOptions{Token: "t"}}
	for _, env := range []Env{
		{Rank: 0, Size: 2, Store: s.Addr().String(), External: true},
		{Rank: 1, Size: 2, Store: s.Addr().String()},
	} {
		c, srv, err := Connect(ctx, env, opts)
		require.NoError(t, err)
		require.Nil(t, srv)
		require.NoError(t, c.Ping(ctx))
		require.NoError(t, c.Close())
	}
	opts.External = true
	c, srv, err := Connect(ctx, Env{Rank: 0, Size: 1, Store: s.Addr().String()}, opts)
	require.NoError(t, err)
	require.Nil(t, srv)
	require.NoError(t, c.Close())
}

func TestConnectErrors(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 10*time.Second)
	for _, env := range []Env{
		{Rank: 2, Size: 2, Store: "h:1"},
		{Rank: -1, Size: 2, Store: "h:1"},
		{Rank: 0, Size: 0, Store: "h:1"},
		{Rank: 0, Size: 1, Store: "nohostport"},
	} {
		_, _, err := Connect(ctx, env, ConnectOptions{})
		require.ErrorIs(t, err, ErrInvalid, "%+v", env)
	}

	// Rank 0 cannot serve on a port that is taken.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, _, err = Connect(ctx, Env{Rank: 0, Size: 2, Store: "x:1"}, ConnectOptions{ListenAddr: ln.Addr().String()})
	require.ErrorContains(t, err, "rank 0 serves the store")

	// A rank 0 whose own dial fails closes the server it started.
	_, srv, err := Connect(ctx, Env{Rank: 0, Size: 1, Store: "x:1"}, ConnectOptions{
		ListenAddr: "127.0.0.1:0",
		Server:     ServerOptions{Token: "a"},
		Client:     ClientOptions{Token: "b"},
	})
	require.ErrorIs(t, err, ErrAuth)
	require.Nil(t, srv)
}
