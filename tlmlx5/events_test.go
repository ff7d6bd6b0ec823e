package tlmlx5

import (
	gocontext "context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// waitNoCompletion waits as coll's bounded waits do until a WaitEvent ends without a
// completion (completions that were there are polled first): the team reads the
// device's events at its next Poll.
func waitNoCompletion(t *testing.T, ft *fakeTeam, tm *team) {
	t.Helper()
	for i := 0; i < 100; i++ {
		ctx, cancel := gocontext.WithTimeout(gocontext.Background(), time.Millisecond)
		err := tm.WaitEvent(ctx)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, gocontext.DeadlineExceeded)
			require.True(t, tm.ev.due.Load(), "a wait that ended on its deadline must have the events read")
			return
		}
		ft.poll(t)
	}
	t.Fatal("every wait saw a completion")
}

// TestDeviceFatalFailsLinks: a DEVICE_FATAL (which soft0 raises leaving every QP
// working, the worst case: a device in that state may end no work request) fails every
// link of every team on the context at the first poll after a wait that ended without
// a completion, naming the event, and the waiting task quiesces. Without the events
// read, the root below would wait for its leaves until coll's deadline.
func TestDeviceFatalFailsLinks(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 3
	ft := newFakeTeam(t, n, nil)
	ft.warm(t) // links 0-1, 0-2, 1-2
	cs := plainCase(collective.Gather, "linear", n, 0, 64, collective.Uint8, 0)
	runs := cs.build(t, ft.newSeq())
	tasks := ft.initAll(t, runs, runs[0].spec.Seq)
	fill(rnd, runs)
	require.NoError(t, tasks[0].Post(1), "the root waits for its leaves, which do not post")
	for i := 0; i < 20; i++ {
		ft.poll(t)
	}
	done, errs := states(tasks[:1])
	require.False(t, done[0])
	require.NoError(t, errs[0])

	soft, err := verbs.SoftControl(ft.ctx.(*context).dev)
	require.NoError(t, err)
	require.NoError(t, soft.RaiseEvent(verbs.EventDeviceFatal, 0, nil))
	for i := 0; i < 20; i++ {
		ft.poll(t)
	}
	root := ft.eps[0].(*team)
	require.NoError(t, root.broken, "read before eventPolls polls or a wait: the test would not show the wait's part")
	for _, ep := range ft.eps {
		waitNoCompletion(t, ft, ep.(*team))
	}
	ft.poll(t)
	for r, ep := range ft.eps {
		tm := ep.(*team)
		require.Error(t, tm.broken, "rank %d", r)
		require.ErrorContains(t, tm.broken, "DEVICE_FATAL", "rank %d", r)
		for _, pe := range tm.linked {
			require.True(t, pe.down, "rank %d's link to %d", r, pe.rank)
		}
	}
	for p := 1; p < n; p++ {
		require.True(t, root.PeerDown(p), "coll fails the root's gather on its peers being down")
	}
	ft.quiesce(t, tasks) // and closes them
}

// TestDeviceFatalRefusesNewLinks: a lazy team that read a DEVICE_FATAL makes no new
// link: the first use of a peer fails naming the event. A team made on the context
// afterwards fails at once, naming it too: the log still holds the event. (It was
// made, and linked, as if nothing had happened.)
func TestDeviceFatalRefusesNewLinks(t *testing.T) {
	ft := newFakeTeam(t, 2, nil)
	soft, err := verbs.SoftControl(ft.ctx.(*context).dev)
	require.NoError(t, err)
	require.NoError(t, soft.RaiseEvent(verbs.EventDeviceFatal, 0, nil))
	tm := ft.eps[0].(*team)
	waitNoCompletion(t, ft, tm) // no CQ yet: WaitEvent waits for its ctx
	require.NoError(t, tm.Poll(ft.hs[0]))
	require.Error(t, tm.ev.fatal)
	pe := tm.link(1)
	require.True(t, pe.down)
	require.ErrorContains(t, tm.broken, "DEVICE_FATAL")
	for _, lazy := range []bool{false, true} {
		p := driver.TeamParams{Rank: 0, Size: 2}
		if lazy {
			p.Messenger = fakeMessenger{m: &fakeMessages{close: map[int]bool{}}, rank: 0}
		}
		_, _, err = ft.ctx.NewEndpoint(p)
		require.ErrorContains(t, err, "DEVICE_FATAL", "lazy %v", lazy)
	}
}

// TestGoneDeviceFailsLinks: a device that goes away (DEVICE_FATAL, then every read of
// its events fails with EIO) fails every link, and a team made afterwards fails at
// once. A failing read alone counts as the device being gone.
func TestGoneDeviceFailsLinks(t *testing.T) {
	ft := newMeshTeam(t, 3, nil)
	ft.warm(t)
	soft, err := verbs.SoftControl(ft.ctx.(*context).dev)
	require.NoError(t, err)
	require.NoError(t, soft.Disassociate())
	// A link that fails before the events are read names the DEVICE_FATAL that came
	// with the failing read (failureCause).
	cut := ft.eps[1].(*team)
	cut.CutOff(2, "test cut")
	require.ErrorContains(t, cut.broken, "test cut")
	require.ErrorContains(t, cut.broken, "DEVICE_FATAL")
	for r, ep := range ft.eps {
		tm := ep.(*team)
		tm.checkEvents()
		require.ErrorContains(t, tm.broken, "DEVICE_FATAL", "rank %d", r)
		for _, pe := range tm.linked {
			require.True(t, pe.down, "rank %d's link to %d", r, pe.rank)
		}
		tm.checkEvents() // the failing reads go on: nothing more to do
	}
	_, _, err = ft.ctx.NewEndpoint(driver.TeamParams{Rank: 0, Size: 1})
	require.ErrorContains(t, err, "DEVICE_FATAL")

	// A team that did not see the DEVICE_FATAL (the log dropped it) still takes the
	// failing read as fatal; a closed context is no device failure.
	tm := &team{c: ft.ctx.(*context)}
	require.True(t, tm.readFailed(fmt.Errorf("wrapped: %w", unix.EIO)))
	require.ErrorContains(t, tm.ev.fatal, "it is gone")
	require.False(t, (&team{c: tm.c}).readFailed(verbs.ErrClosed))
}

// TestQPEventFloor: a QP event names a peer's QP only if it was read after the QP was
// made: an event of an older QP that had the same number does not fail the link.
func TestQPEventFloor(t *testing.T) {
	ft := newMeshTeam(t, 2, nil)
	pe := ft.eps[0].(*team).peers[1]
	qpn := pe.qp.QPN()
	require.False(t, pe.ofQP(verbs.AsyncEvent{Type: verbs.EventQPFatal, QPN: qpn, Seq: pe.evFloor}), "read before the QP was made")
	require.True(t, pe.ofQP(verbs.AsyncEvent{Type: verbs.EventQPFatal, QPN: qpn, Seq: pe.evFloor + 1}))
	require.False(t, pe.ofQP(verbs.AsyncEvent{Type: verbs.EventQPFatal, QPN: qpn + 1, Seq: pe.evFloor + 1}), "another QP")
}

// TestQPFatalFailsItsLink: a QP error event fails the link of that QP only, naming the
// event and the QP; the team's other links stay up. Read before any completion is
// polled, the event alone fails the link (the path where a device completes nothing);
// where the flushed completions are polled first, their failure names the event too
// (failureCause).
func TestQPFatalFailsItsLink(t *testing.T) {
	for _, eventFirst := range []bool{true, false} {
		ft := newMeshTeam(t, 3, nil)
		ft.warm(t)
		tm := ft.eps[0].(*team)
		soft, err := verbs.SoftControl(ft.ctx.(*context).dev)
		require.NoError(t, err)
		require.NoError(t, soft.RaiseEvent(verbs.EventQPFatal, 0, tm.peers[2].qp))
		if eventFirst {
			tm.checkEvents()
			require.Error(t, tm.broken)
			require.NotContains(t, tm.broken.Error(), "WR_FLUSH_ERR", "failed by the event, not by a completion")
		} else {
			// soft0's QP worker flushes. The count of polls is held at 0, so that no
			// poll reads the events and only a completion can fail the link.
			for deadline := time.Now().Add(20 * time.Second); tm.broken == nil && time.Now().Before(deadline); {
				tm.ev.polls = 0
				require.NoError(t, tm.Poll(ft.hs[0]))
				runtime.Gosched()
			}
			require.Error(t, tm.broken)
			require.Contains(t, tm.broken.Error(), "WR_FLUSH_ERR", "failed by the flushed completion")
		}
		require.True(t, tm.peers[2].down)
		require.False(t, tm.peers[1].down, "another QP's event")
		require.ErrorContains(t, tm.broken, "QP_FATAL on QP")
		var le *driver.LinkError
		require.ErrorAs(t, tm.broken, &le)
		require.Equal(t, 2, le.Peer)
	}
}

// TestPortErrNamedInLinkFailure: while the port of the team's QPs is down (PORT_ERR,
// not yet PORT_ACTIVE), a link that fails says so, for its RETRY_EXC would otherwise
// blame the peer; a team made while the port is down knows it too; after PORT_ACTIVE
// a failure says nothing of the port.
func TestPortErrNamedInLinkFailure(t *testing.T) {
	ft := newMeshTeam(t, 3, nil)
	ft.warm(t)
	dev := ft.ctx.(*context).dev
	soft, err := verbs.SoftControl(dev)
	require.NoError(t, err)
	require.NoError(t, soft.RaiseEvent(verbs.EventPortErr, dev.Port(), nil))
	tm := ft.eps[0].(*team)
	waitNoCompletion(t, ft, tm)
	require.NoError(t, tm.Poll(ft.hs[0]))
	require.NoError(t, tm.broken, "a port that went down fails nothing by itself: RC retries may outlast it")
	tm.CutOff(1, "test cut")
	require.ErrorContains(t, tm.broken, "test cut")
	require.ErrorContains(t, tm.broken, "async event PORT_ERR")

	later, _, err := ft.ctx.NewEndpoint(driver.TeamParams{Rank: 0, Size: 1})
	require.NoError(t, err)
	require.NotNil(t, later.(*team).ev.portDown, "a team made while the port is down")
	require.NoError(t, later.Close())

	require.NoError(t, soft.RaiseEvent(verbs.EventPortActive, dev.Port(), nil))
	tm2 := ft.eps[1].(*team)
	waitNoCompletion(t, ft, tm2)
	require.NoError(t, tm2.Poll(ft.hs[1]))
	require.Nil(t, tm2.ev.portDown)
	tm2.CutOff(2, "second cut")
	require.ErrorContains(t, tm2.broken, "second cut")
	require.NotContains(t, tm2.broken.Error(), "PORT_ERR", "the port came back before this failure")
}
