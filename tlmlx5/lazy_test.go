package tlmlx5

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/internal/topo"
)

// linkedPeers is the sorted ranks rank r's endpoint made a QP for.
func linkedPeers(ft *fakeTeam, r int) []int {
	var out []int
	for _, pe := range ft.eps[r].(*team).linked {
		if pe.qp != nil {
			out = append(out, pe.rank)
		}
	}
	sort.Ints(out)
	return out
}

// TestLazyTeams: on lazy teams of 1 to 17 ranks no QP exists after Connect, and every
// algorithm of every collective (the size-based default included) runs data-checked
// on a team whose links are made by the collectives themselves; the links a rank
// ends with are peers, never itself, and never more than n-1.
func TestLazyTeams(t *testing.T) {
	rnd := testutil.Rand(t)
	for n := 1; n <= 17; n++ {
		ft := newFakeTeam(t, n, nil)
		for r := range n {
			require.Zero(t, ft.eps[r].(driver.LinkCounter).Links(), "n=%d rank %d: a QP at Connect", n, r)
		}
		for _, c := range collective.Types() {
			for _, alg := range append([]string{""}, Algorithms(c)...) {
				if alg != "" && Fits(c, alg, n) != nil {
					continue
				}
				ip := collective.Describe(c).InPlace && rnd.IntN(2) == 0
				runCase(t, ft, rnd, newCase(rnd, c, alg, n, rnd.IntN(n), 1+rnd.IntN(64), ip))
			}
		}
		for r := range n {
			peers := linkedPeers(ft, r)
			require.NotContains(t, peers, r)
			require.LessOrEqual(t, len(peers), n-1)
		}
	}
}

// TestLazySimultaneousConnect: both ranks send before either hears from the other,
// so both start the handshake at once. Each makes one QP, every message arrives in
// order, and the handshake took two hellos per side. A one-sided start takes three.
func TestLazySimultaneousConnect(t *testing.T) {
	for _, both := range []bool{true, false} {
		ft := newFakeTeam(t, 2, nil)
		const msgs = 5
		senders := []int{0}
		if both {
			senders = append(senders, 1)
		}
		for i := range msgs {
			for _, r := range senders {
				require.NoError(t, ft.eps[r].SendCtl(1-r, []byte{byte(r), byte(i)}))
			}
		}
		require.Equal(t, len(senders), ft.msgs.sent, "one hello per starting side before anything is delivered")
		require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
			for _, r := range senders {
				if len(ft.hs[1-r].from[r]) < msgs {
					return false
				}
			}
			return true
		}), "both=%v: messages did not arrive", both)
		for _, r := range senders {
			for i, m := range ft.hs[1-r].from[r] {
				require.Equal(t, []byte{byte(r), byte(i)}, m, "both=%v: in order", both)
			}
		}
		want := 3
		if both {
			want = 4
		}
		require.Equal(t, want, ft.msgs.sent, "both=%v: hellos", both)
		for r := range 2 {
			require.Equal(t, []int{1 - r}, linkedPeers(ft, r))
			require.NoError(t, ft.eps[r].Broken())
		}
	}
}

// TestLazyConnectNoAnswer: a peer that never answers a connect (its messages are
// lost) fails the link at the bound: the peer is down and the team broken, with a
// reason; nothing hangs.
func TestLazyConnectNoAnswer(t *testing.T) {
	old := connectBound
	connectBound = 50 * time.Millisecond
	t.Cleanup(func() { connectBound = old })
	ft := newFakeTeam(t, 3, nil)
	ft.msgs.drop = func(from, to int, _ []byte) bool { return to == 2 }
	require.NoError(t, ft.eps[0].SendCtl(2, []byte("anyone?")))
	require.NoError(t, ft.eps[0].SendCtl(1, []byte("hello")))
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return ft.eps[0].PeerDown(2) }), "the unanswered link never failed")
	require.ErrorContains(t, ft.eps[0].Broken(), "no answer to its connect")
	require.Equal(t, 1, len(ft.hs[1].from[0]), "the answering peer still got its message")
	require.Zero(t, ft.eps[0].Unsent(), "what was queued for the dead link is dropped")
}

// TestLazyConnectFault: an injected connect fault (fault.Connect) fails the link on
// the rank where it fires, and its refusal takes the link down on the peer too, so
// both teams break at once rather than at the bound. A fault that never fires fails
// the test.
func TestLazyConnectFault(t *testing.T) {
	for _, at := range []int{0, 1} { // the starting rank, the answering rank
		fs := fault.NewSet([]fault.Fault{{Kind: fault.Connect, Rank: at, N: 1}}, at)
		ft := newFakeTeam(t, 2, func(r int) *fault.Set {
			if r == at {
				return fs
			}
			return nil
		})
		err := ft.eps[0].SendCtl(1, []byte("x"))
		if at == 0 {
			require.Error(t, err, "the link failed as it started")
		} else {
			require.NoError(t, err, "queued while the link is made")
		}
		require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
			return ft.eps[0].Broken() != nil && ft.eps[1].Broken() != nil
		}), "fault on rank %d: both ranks must see the link fail", at)
		require.Equal(t, int64(1), fs.Seen(fault.Connect), "the connect fault did not fire on rank %d", at)
		require.ErrorIs(t, ft.eps[at].Broken(), fault.ErrInjected)
		require.ErrorContains(t, ft.eps[1-at].Broken(), "counts its link to this rank down")
		require.True(t, ft.eps[0].PeerDown(1) && ft.eps[1].PeerDown(0))
		require.Empty(t, ft.hs[1].from[0])
	}
}

// TestLazyPeerClosed: a peer whose mailbox is closed (its team closed) is down
// without breaking the team.
func TestLazyPeerClosed(t *testing.T) {
	ft := newFakeTeam(t, 3, nil)
	ft.msgs.close[2] = true
	require.Error(t, ft.eps[0].SendCtl(2, []byte("x")), "the link cannot start")
	require.True(t, ft.eps[0].PeerDown(2))
	require.NoError(t, ft.eps[0].Broken())
	require.NoError(t, ft.eps[0].SendCtl(1, []byte("y")))
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return len(ft.hs[1].from[0]) == 1 }))
}

// TestLazyPeerClosedMidConnect: a peer that closes its team after it answered a
// hello, before the link was up both ways, says so through the Messenger: the rank
// that started the link counts it gone (the team is not broken) and tells its team
// (Messenger.Left, with the closing rank's next collective: it did its part of the
// earlier ones, whose outcome may still be on its way), instead of finishing a link to
// a closed endpoint and waiting on it for the bound or a deadline.
func TestLazyPeerClosedMidConnect(t *testing.T) {
	ft := newFakeTeam(t, 2, nil)
	ft.msgs.drop = func(_, to int, _ []byte) bool { return to == 0 } // rank 0 hears nothing yet
	require.NoError(t, ft.eps[0].SendCtl(1, []byte("x")))
	ft.deliver()
	require.True(t, ft.eps[1].(driver.Lazy).Linking(0), "rank 1 answered and waits for rank 0's side")
	ft.msgs.drop = nil
	ft.next[1] = 5 // rank 1 did its part of collectives 0-4
	require.NoError(t, ft.eps[1].Close())
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return ft.eps[0].PeerDown(1) }), "rank 0 never learned that rank 1 closed")
	require.NoError(t, ft.eps[0].Broken(), "a peer that closed breaks nothing")
	require.Equal(t, []string{"0<-1 from 5: rank 1 closed its team before the link to it was up"}, ft.msgs.left,
		"the news says from which collective on rank 1 is gone")
}

// knomialPeers is rank r's parent and children in the k-nomial tree of n ranks rooted
// at root, from internal/topo.
func knomialPeers(n, root, r, radix int) []int {
	parent, children := topo.KNomialPeers(n, root, r, radix)
	out := slices.Clone(children)
	if parent >= 0 {
		out = append(out, parent)
	}
	sort.Ints(out)
	return out
}

// TestLazyPeerSetKnomial: on 64 ranks, a k-nomial gather, then a k-nomial bcast from
// another root, then recursive-doubling allreduce make exactly the links their trees
// and exchanges name (computed from internal/topo), which stay O(log n) per rank.
func TestLazyPeerSetKnomial(t *testing.T) {
	rnd := testutil.Rand(t)
	const n, radix = 64, 4
	ft := newFakeTeam(t, n, nil)
	want := make([]map[int]bool, n)
	for r := range want {
		want[r] = map[int]bool{}
	}
	add := func(peers func(r int) []int) {
		for r := range n {
			for _, p := range peers(r) {
				want[r][p] = true
			}
		}
	}
	check := func(what string) {
		for r := range n {
			var w []int
			for p := range want[r] {
				w = append(w, p)
			}
			sort.Ints(w)
			require.Equal(t, w, linkedPeers(ft, r), "%s: rank %d", what, r)
			require.LessOrEqual(t, len(w), 2*(radix-1)*3+6, "%s: rank %d holds more than O(log n) links", what, r)
		}
	}
	runCase(t, ft, rnd, newCase(rnd, collective.Gather, fmt.Sprintf("knomial:%d", radix), n, 0, 3, false))
	add(func(r int) []int { return knomialPeers(n, 0, r, radix) })
	check("gather")
	runCase(t, ft, rnd, newCase(rnd, collective.Bcast, fmt.Sprintf("knomial:%d", radix), n, 37, 5, false))
	add(func(r int) []int { return knomialPeers(n, 37, r, radix) })
	check("gather, bcast")
	runCase(t, ft, rnd, newCase(rnd, collective.Allreduce, "rd", n, 0, 8, false))
	add(func(r int) []int {
		var out []int
		for b := 1; b < n; b <<= 1 {
			out = append(out, r^b)
		}
		return out
	})
	check("gather, bcast, allreduce")
}

// TestDefaultsAvoidLinearOnLargeTeams: past linearMax ranks the size-based default
// never picks an algorithm whose root talks to every rank, at any size, while
// naming one still works.
func TestDefaultsAvoidLinearOnLargeTeams(t *testing.T) {
	rootedAll := map[collective.Type][]string{
		collective.Gather: {"linear"}, collective.Scatter: {"linear"},
		collective.Bcast: {"sag"}, collective.Reduce: {"srg"},
	}
	for c, linear := range rootedAll {
		for _, n := range []int{linearMax + 1, 1024, 16384} {
			for bytes := 1; bytes <= 1<<30; bytes <<= 2 {
				for i := range algorithms {
					a := &algorithms[i]
					if a.coll == c && a.auto != nil && a.auto(n, bytes) && (a.fits == nil || a.fits(n) == nil) {
						require.NotContains(t, linear, a.name, "%v n=%d bytes=%d", c, n, bytes)
						break
					}
				}
			}
			require.NoError(t, Fits(c, linear[0], n), "by name")
		}
	}
	// Small teams keep their measured choice.
	for i := range algorithms {
		if a := &algorithms[i]; a.coll == collective.Gather && a.name == "linear" {
			require.True(t, a.auto(8, 1<<20))
		}
	}
}
