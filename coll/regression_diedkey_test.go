package coll_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/bootstrap"
	"github.com/ibcoll/ibcoll/coll"
)

// TestDiedKeyPerTeam: a world team of 3 processes and a sub-team of world ranks 1 and
// 2 (TCPOOBNamed, its own ranks 0 and 1) share each process's store client, and each
// watches for deaths. World rank 0's process dies: the world team hears that its rank
// 0 died, and the sub-team, of which it was no member, hears nothing. Then world rank
// 2's process dies: the sub-team hears that its rank 1 died. (Every team's will went
// under the one bootstrap.DiedKey, one per connection, so the sub-team was told that
// its rank 0, world rank 1, alive, had died, and cut it off: found by a review.)
func TestDiedKeyPerTeam(t *testing.T) {
	srv, err := bootstrap.NewServer("127.0.0.1:0", bootstrap.ServerOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	proxies := make([]*killableConn, 3)
	clients := make([]*bootstrap.Client, 3)
	for r := range 3 {
		proxies[r] = newKillableConn(t, srv.Addr().String())
		clients[r], err = bootstrap.Dial(ctx, proxies[r].ln.Addr().String(), bootstrap.ClientOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { clients[r].Close() })
	}
	type news struct {
		team string
		me   int // the world rank of the watching process
		rank int // the dead rank, in the team's numbering
	}
	got := make(chan news, 16)
	for r := range 3 {
		w, err := coll.TCPOOB(clients[r], r, 3)
		require.NoError(t, err)
		stop, err := w.(coll.PeerWatcher).WatchPeers(ctx, func(rank int, cause string) { got <- news{"world", r, rank} })
		require.NoError(t, err)
		t.Cleanup(stop)
	}
	for r := 1; r < 3; r++ {
		s, err := coll.TCPOOBNamed(clients[r], "sub", r-1, 2)
		require.NoError(t, err)
		stop, err := s.(coll.PeerWatcher).WatchPeers(ctx, func(rank int, cause string) { got <- news{"sub", r, rank} })
		require.NoError(t, err)
		t.Cleanup(stop)
	}
	// collect gathers the news until none came for quiet.
	collect := func(quiet time.Duration) []news {
		var all []news
		for {
			select {
			case n := <-got:
				all = append(all, n)
			case <-time.After(quiet):
				return all
			}
		}
	}
	// alive keeps the news of the processes still alive (a dead process's own watch
	// reports rank 0: it lost the store).
	alive := func(ns []news, dead ...int) []news {
		var out []news
		for _, n := range ns {
			if !slices.Contains(dead, n.me) {
				out = append(out, n)
			}
		}
		return out
	}
	proxies[0].kill() // world rank 0's process dies
	require.ElementsMatch(t, []news{{"world", 1, 0}, {"world", 2, 0}}, alive(collect(time.Second), 0),
		"world rank 0's death: the world team hears it, the sub-team does not")
	proxies[2].kill() // world rank 2 (the sub-team's rank 1) dies
	var sub []news
	for _, n := range alive(collect(time.Second), 0, 2) {
		if n.team == "sub" {
			sub = append(sub, n)
		}
	}
	require.Equal(t, []news{{"sub", 1, 1}}, sub, "world rank 2's death, told to the sub-team's other member")
}
