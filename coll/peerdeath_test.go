package coll_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/bootstrap"
	"github.com/ibcoll/ibcoll/coll"
)

// killableConn is one rank's store connection through a proxy: kill drops both
// sides at once, as the kernel does for a process killed with SIGKILL.
type killableConn struct {
	ln   net.Listener
	mu   sync.Mutex
	nets []net.Conn
	wg   sync.WaitGroup
}

func newKillableConn(t *testing.T, target string) *killableConn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	k := &killableConn{ln: ln}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				return
			}
			k.mu.Lock()
			k.nets = append(k.nets, in, out)
			k.mu.Unlock()
			k.wg.Add(2)
			go func() { defer k.wg.Done(); io.Copy(out, in); out.Close() }()
			go func() { defer k.wg.Done(); io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(k.kill)
	return k
}

func (k *killableConn) kill() {
	k.ln.Close()
	k.mu.Lock()
	for _, c := range k.nets {
		c.Close()
	}
	k.mu.Unlock()
	k.wg.Wait()
}

// deafOOB is the dying rank's OOB: it leaves its will with the store, as every
// rank does, but does not react to news of deaths, as a killed process cannot
// (here the "dead" rank lives on in the test process; its own store connection
// is the one that drops).
type deafOOB struct{ coll.OOB }

// Mailbox forwards the store's, so that the victim's team wires up as the others'.
func (d deafOOB) Mailbox() (coll.Mailbox, error) { return d.OOB.(coll.Messenger).Mailbox() }

func (d deafOOB) WatchPeers(ctx context.Context, _ func(int, string)) (func(), error) {
	return d.OOB.(coll.PeerWatcher).WatchPeers(ctx, func(int, string) {})
}

// dialRank connects rank r to the store, the victim through the killable proxy; the
// client closes at the end of the test.
func dialRank(ctx context.Context, t *testing.T, srv *bootstrap.Server, proxy *killableConn, r, victim int) *bootstrap.Client {
	addr := srv.Addr().String()
	if r == victim {
		addr = proxy.ln.Addr().String()
	}
	c, err := bootstrap.Dial(ctx, addr, bootstrap.ClientOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// deathRank is one rank of a multi-"process" team over the store.
type deathRank struct {
	c    *bootstrap.Client
	cc   *coll.Context
	oob  coll.OOB
	team *coll.Team
}

// TestPeerDeathNoticed: when a rank's process dies (its store connection drops),
// every other rank learns it from the store and fails what it is doing with a
// *PeerError naming that rank: during NewTeam, while waiting in a collective the dead
// rank never initialized, and in a collective the dead rank had posted; for the first,
// a middle and the last rank. The deadline is a minute: an error that comes from it
// fails the test. Losing the store itself (the process serving it died) is reported
// as rank 0's death.
func TestPeerDeathNoticed(t *testing.T) {
	const n = 4
	for _, phase := range []string{"setup", "init", "mid", "store"} {
		for _, victim := range []int{0, n / 2, n - 1} {
			if phase == "store" && victim != 0 {
				continue
			}
			t.Run(fmt.Sprintf("%s/rank%d", phase, victim), func(t *testing.T) {
				peerDeath(t, n, phase, victim, true)
			})
			if phase == "mid" || phase == "store" {
				t.Run(fmt.Sprintf("%s/rank%d/default", phase, victim), func(t *testing.T) {
					peerDeath(t, n, phase, victim, false)
				})
			}
		}
	}
}

// peerDeath kills victim's store connection in phase. With allOrNothing every other
// rank's collective fails naming it, or every one succeeded (the victim posted before
// dying, and the collective ended before its death); without, a rank whose part the
// victim had already served may succeed, and every other one fails so.
func peerDeath(t *testing.T, n int, phase string, victim int, allOrNothing bool) {
	srv, err := bootstrap.NewServer("127.0.0.1:0", bootstrap.ServerOptions{})
	require.NoError(t, err)
	defer srv.Close()
	proxy := newKillableConn(t, srv.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	kill := proxy.kill
	if phase == "store" {
		kill = func() { srv.Close() }
	}

	ranks := make([]*deathRank, n)
	for r := range ranks {
		c := dialRank(ctx, t, srv, proxy, r, victim)
		// What bootstrap.Connect does for each process.
		require.NoError(t, c.Will(ctx, bootstrap.DiedKey, []byte(fmt.Sprint(r))))
		oob, err := coll.TCPOOBNamed(c, "death", r, n)
		require.NoError(t, err)
		if r == victim {
			oob = deafOOB{oob}
		}
		cc, err := coll.NewContext(coll.Config{Device: device(), Timeout: time.Minute, AllOrNothing: allOrNothing})
		require.NoError(t, err)
		defer cc.Close()
		ranks[r] = &deathRank{c: c, cc: cc, oob: oob}
	}

	if phase != "setup" {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r, dr := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dr.team, errs[r] = dr.cc.NewTeam(ctx, dr.oob)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			require.NoError(t, err, "rank %d NewTeam", r)
		}
		for _, dr := range ranks {
			defer dr.team.Close()
		}
	}

	gather := func(r int) coll.Args {
		src := make([]byte, 64)
		a := coll.Args{Type: coll.Gather, Root: (victim + 1) % n, DType: coll.Uint8,
			Src: coll.BufferDesc{Slice: src, Count: 64}}
		if r == a.Root {
			a.Dst = coll.BufferDesc{Slice: make([]byte, 64*n), Count: 64 * n}
		}
		return a
	}
	if phase == "mid" || phase == "store" {
		victimReq, err := ranks[victim].team.Init(gather(victim))
		require.NoError(t, err)
		require.NoError(t, victimReq.Post())
		// The dead rank's leftovers are released so that nothing leaks.
		defer func() {
			wctx, wcancel := context.WithTimeout(context.Background(), time.Millisecond)
			_ = victimReq.Wait(wctx)
			wcancel()
			require.NoError(t, victimReq.Close())
		}()
	}

	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, dr := range ranks {
		if r == victim {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if phase == "setup" {
				dr.team, errs[r] = dr.cc.NewTeam(ctx, dr.oob)
				return
			}
			errs[r] = runColl(ctx, dr.team, gather(r))
		}()
	}
	// The victim dies while the others are blocked (or about to be: either way
	// they must end with its death, not their deadline).
	time.Sleep(50 * time.Millisecond)
	kill()
	wg.Wait()
	took := time.Since(start)
	succeeded := 0
	for r, err := range errs {
		if r != victim && err == nil {
			succeeded++
		}
	}
	if allOrNothing && phase != "setup" && succeeded == n-1 {
		// The victim's part was done and reported before it died (its team polls by
		// itself, and links made early let the collective finish within the sleep):
		// every other rank succeeded alike, which is all-or-nothing too.
		return
	}
	for r, err := range errs {
		if r == victim {
			continue
		}
		if err == nil && !allOrNothing && phase != "setup" {
			continue
		}
		require.Error(t, err, "rank %d", r)
		require.ErrorIs(t, err, coll.ErrPeerFailed, "rank %d: %v", r, err)
		require.False(t, errors.Is(err, context.DeadlineExceeded), "rank %d ended at its deadline: %v", r, err)
		var pe *coll.PeerError
		require.ErrorAs(t, err, &pe, "rank %d", r)
		require.Equal(t, victim, pe.Rank, "rank %d: %v", r, err)
		if phase != "setup" {
			// Its own watch breaks the team and says who died; it may have failed
			// first on a peer's news, so the watch's word may come a little later.
			tm := ranks[r].team
			require.Eventually(t, func() bool { return errors.Is(tm.Broken(), coll.ErrTeamBroken) }, 5*time.Second, time.Millisecond,
				"rank %d's team is broken: %v", r, tm.Broken())
			require.Eventually(t, func() bool { return slices.Contains(tm.Dead(), victim) }, 5*time.Second, time.Millisecond,
				"rank %d's Team.Dead() %v lacks rank %d", r, tm.Dead(), victim)
		}
	}
	t.Logf("%s, rank %d died: the others failed within %v: %v", phase, victim, took.Round(time.Millisecond), errs[(victim+1)%n])

	if phase == "setup" {
		for r, dr := range ranks {
			require.Nil(t, dr.team, "rank %d has no team", r)
		}
	}
}

// TestWatchPeersStoreAfterDeath: the store's key names one dead rank, but a watch that
// reported it still reports losing the store afterwards (as rank 0's death), since a
// launcher typically ends the store's process next and a rank whose collective waits on
// rank 0 must hear of it. A rank that closes its own client is no death.
func TestWatchPeersStoreAfterDeath(t *testing.T) {
	const n, victim = 3, 2
	srv, err := bootstrap.NewServer("127.0.0.1:0", bootstrap.ServerOptions{})
	require.NoError(t, err)
	defer srv.Close()
	proxy := newKillableConn(t, srv.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type death struct {
		rank  int
		cause string
	}
	seen := make([]chan death, n)
	var stops []func()
	clients := make([]*bootstrap.Client, n)
	oobs := make([]coll.OOB, n)
	for r := range n {
		c := dialRank(ctx, t, srv, proxy, r, victim)
		clients[r] = c
		oob, err := coll.TCPOOBNamed(c, "watch", r, n)
		require.NoError(t, err)
		oobs[r] = oob
		seen[r] = make(chan death, 4)
		ch := seen[r]
		stop, err := oob.(coll.PeerWatcher).WatchPeers(ctx, func(rank int, cause string) { ch <- death{rank, cause} })
		require.NoError(t, err)
		stops = append(stops, stop)
	}
	next := func(r int) death {
		select {
		case d := <-seen[r]:
			return d
		case <-ctx.Done():
			t.Fatalf("rank %d heard of no death", r)
			return death{}
		}
	}
	proxy.kill()
	for r := range victim {
		d := next(r)
		require.Equal(t, victim, d.rank, "rank %d: %s", r, d.cause)
		require.Contains(t, d.cause, "process died")
	}
	// Rank 1 closes its client: that is its own doing, not news.
	require.NoError(t, clients[1].Close())
	srv.Close()
	d := next(0)
	require.Equal(t, 0, d.rank, "rank 0's watch, after the store went: %s", d.cause)
	require.Contains(t, d.cause, "lost the store")
	_, err = oobs[0].Allgather(ctx, []byte("x"))
	require.ErrorIs(t, err, bootstrap.ErrDisconnected)
	require.ErrorContains(t, err, "this rank lost the store", "the OOB's own error says what it means")
	for _, stop := range stops {
		stop()
	}
	require.Empty(t, seen[1], "a rank that closed its own client reported a death")
	require.Empty(t, seen[0], "one report per death")
}
