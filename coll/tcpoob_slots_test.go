package coll_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/bootstrap"
	"github.com/ibcoll/ibcoll/coll"
)

// TestManyTeamsOnOneClient: every team over a store client holds one of the client's
// request slots with its mailbox's blocked Get. As many teams as the client has
// slots, less those kept for other requests, open and each watches for deaths; their
// messages, the first team's and the last's, still arrive, and a death reaches every
// team; one more team is refused with ErrBusy at once, and opens once a team closed.
// (Before, each team also held a slot with its own blocked Get of the death key: a
// client carrying half its slots' worth of teams starved every other request, and
// the next team's setup hung.)
func TestManyTeamsOnOneClient(t *testing.T) {
	const n, victim = 3, 2
	srv, err := bootstrap.NewServer("127.0.0.1:0", bootstrap.ServerOptions{MaxInflight: 41})
	require.NoError(t, err)
	defer srv.Close()
	proxy := newKillableConn(t, srv.Addr().String())
	// Everything here takes milliseconds: a starved client (the bug) took 55 s.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clients := make([]*bootstrap.Client, n)
	for r := range n {
		clients[r] = dialRank(ctx, t, srv, proxy, r, victim)
	}
	// The victim's will, as bootstrap.Connect leaves it (it watches nothing itself).
	require.NoError(t, clients[victim].Will(ctx, bootstrap.DiedKey, []byte(fmt.Sprint(victim))))
	slots := clients[0].Slots()
	require.Equal(t, 40, slots, "the server's 41 less the keepalive's")
	teams := slots - 8 // coll keeps 8 for other requests
	type team struct {
		boxes []coll.Mailbox
		got   atomic.Int64 // messages rank 1 received
		died  atomic.Int64 // deaths the live ranks heard of
		stops []func()
	}
	open := func(i int) (*team, error) {
		tm := &team{}
		for r := range n {
			oob, err := coll.TCPOOBNamed(clients[r], fmt.Sprint("team/", i), r, n)
			require.NoError(t, err)
			box, err := oob.(coll.Messenger).Mailbox()
			if err != nil {
				for _, b := range tm.boxes {
					b.Close("")
				}
				return nil, err
			}
			tm.boxes = append(tm.boxes, box)
			if r == 1 {
				box.Listen(func(from int, msg []byte) {
					if len(msg) > 0 {
						tm.got.Add(1)
					}
				})
			}
			if r != victim {
				stop, err := oob.(coll.PeerWatcher).WatchPeers(ctx, func(rank int, _ string) {
					if rank == victim {
						tm.died.Add(1)
					}
				})
				require.NoError(t, err, "team %d rank %d", i, r)
				tm.stops = append(tm.stops, stop)
			}
		}
		return tm, nil
	}
	var all []*team
	for i := range teams {
		tm, err := open(i)
		require.NoError(t, err, "team %d of %d", i, teams)
		all = append(all, tm)
	}
	_, err = open(teams)
	require.ErrorIs(t, err, coll.ErrBusy)
	require.ErrorContains(t, err, fmt.Sprintf("%d teams are open on this store client", teams))

	eventually := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			select {
			case <-ctx.Done():
				t.Fatalf("never: %s", what)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	for _, i := range []int{0, teams - 1} {
		require.NoError(t, all[i].boxes[0].Send(1, []byte("hello")))
		eventually(fmt.Sprint("team ", i, "'s message arrives"), func() bool { return all[i].got.Load() == 1 })
	}

	last := all[teams-1]
	for _, b := range last.boxes {
		b.Close("")
	}
	for _, stop := range last.stops {
		stop()
	}
	all = all[:teams-1]
	tm, err := open(teams)
	require.NoError(t, err, "a team after one closed")
	all = append(all, tm)
	require.NoError(t, tm.boxes[2].Send(1, []byte("hello")))
	eventually("the new team's message arrives", func() bool { return tm.got.Load() == 1 })

	proxy.kill()
	for i, tm := range all {
		eventually(fmt.Sprint("team ", i, " hears of the death on both live ranks"), func() bool { return tm.died.Load() == n-1 })
	}
	for _, tm := range all {
		for _, stop := range tm.stops {
			stop()
		}
		for _, b := range tm.boxes {
			b.Close("")
		}
	}
}
