package verbs_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/verbs"
)

// TestContractEvents: on every provider, a context's Events reads without blocking
// and numbers what it returns, and a since past the newest event is refused naming
// it. Where the provider can raise events on demand (a soft control surface; not on
// real devices, whose port events TestDevicePortEvents takes), each one raised comes
// back once per caller, in order, with its port or QP, a QP error event leaves its
// QP in the error state, and the log's gap shows.
func TestContractEvents(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := connected(t, p)
		evs, last, err := a.ctx.Events(0, nil)
		require.NoError(t, err)
		require.Len(t, evs, int(last), "from 0, every event the context took (none dropped yet)")
		for i, e := range evs {
			require.Equal(t, uint64(i+1), e.Seq)
		}
		again, last2, err := a.ctx.Events(last, nil)
		require.NoError(t, err)
		require.Equal(t, uint64(len(again)), last2-last, "only the events after since")
		_, _, err = a.ctx.Events(last2+5, nil)
		require.ErrorIs(t, err, verbs.ErrInvalid)
		require.ErrorContains(t, err, "since")
		require.Positive(t, a.ctx.Port())
		require.EqualValues(t, a.ctx.Port(), a.qp.Info().Port, "Port is the port of the context's QPs")

		s, err := verbs.SoftControl(a.ctx)
		if err != nil {
			require.ErrorIs(t, err, verbs.ErrNotSupported)
			t.Logf("%s raises no event on demand: checked reading and numbering only", p.devA)
			return
		}
		require.NoError(t, s.RaiseEvent(verbs.EventPortErr, 1, nil))
		require.NoError(t, s.RaiseEvent(verbs.EventQPFatal, 0, a.qp))
		require.NoError(t, s.RaiseEvent(verbs.EventDeviceFatal, 0, nil))
		require.NoError(t, s.RaiseEvent(verbs.EventPortActive, 1, nil))
		want := []struct {
			typ  verbs.AsyncEventType
			port int
			qpn  uint32
			str  string
		}{
			{verbs.EventPortErr, 1, 0, "PORT_ERR on port 1"},
			{verbs.EventQPFatal, 0, a.qp.QPN(), "QP_FATAL on QP"},
			{verbs.EventDeviceFatal, 0, 0, "DEVICE_FATAL"},
			{verbs.EventPortActive, 1, 0, "PORT_ACTIVE on port 1"},
		}
		for _, since := range []uint64{last2, last2} { // two callers, each from its own place
			evs, next, err := a.ctx.Events(since, nil)
			require.NoError(t, err)
			require.Len(t, evs, len(want))
			require.Equal(t, since+uint64(len(want)), next)
			for i, w := range want {
				require.Equal(t, since+uint64(i+1), evs[i].Seq)
				require.Equal(t, w.typ, evs[i].Type)
				require.Equal(t, w.port, evs[i].Port)
				require.Equal(t, w.qpn, evs[i].QPN)
				require.Contains(t, evs[i].String(), w.str)
				require.False(t, evs[i].At.IsZero())
			}
		}
		st, err := a.qp.State()
		require.NoError(t, err)
		require.Equal(t, verbs.QPStateError, st, "QP_FATAL: the QP is in the error state")
		evs, _, err = b.ctx.Events(0, nil)
		require.NoError(t, err)
		require.Empty(t, evs, "another context's events are its own")

		// Bad requests to raise one.
		require.ErrorIs(t, s.RaiseEvent(0, 0, nil), verbs.ErrInvalid)
		require.ErrorIs(t, s.RaiseEvent(verbs.EventOther, 0, nil), verbs.ErrInvalid)
		require.ErrorContains(t, s.RaiseEvent(verbs.EventQPFatal, 0, nil), "needs its qp")
		require.ErrorContains(t, s.RaiseEvent(verbs.EventQPFatal, 0, b.qp), "another context")
		require.ErrorContains(t, s.RaiseEvent(verbs.EventPortErr, 2, nil), "port is 2")

		// The log keeps the newest EventLogLen: a caller that fell behind sees a gap.
		_, from, err := a.ctx.Events(0, nil)
		require.NoError(t, err)
		for i := 0; i < verbs.EventLogLen+10; i++ {
			require.NoError(t, s.RaiseEvent(verbs.EventSMChange, 1, nil))
		}
		evs, next, err := a.ctx.Events(from, nil)
		require.NoError(t, err)
		require.Len(t, evs, verbs.EventLogLen)
		require.Equal(t, from+verbs.EventLogLen+10, next)
		require.Equal(t, from+11, evs[0].Seq, "the oldest 10 were dropped")
	})
}

// TestEventsOfAGoneDevice: a device that goes away queues DEVICE_FATAL and then fails
// every read of its events; Events returns the events read before the failure with
// the error, every time it is asked, so that no caller loses the DEVICE_FATAL. (They
// were logged and never returned.) LatestEvent drains as Events does.
func TestEventsOfAGoneDevice(t *testing.T) {
	e := newEnd(t, verbs.SoftDeviceName)
	s := softControl(t, e.ctx)
	_, since, err := e.ctx.Events(0, nil)
	require.NoError(t, err)
	require.NoError(t, s.RaiseEvent(verbs.EventPortErr, 1, nil))
	latest, err := e.ctx.LatestEvent()
	require.NoError(t, err)
	require.Equal(t, since+1, latest, "LatestEvent took the pending event into the log")
	require.NoError(t, s.Disassociate())
	for i := 0; i < 2; i++ {
		evs, next, err := e.ctx.Events(since, nil)
		require.ErrorIs(t, err, unix.EIO, "read %d", i)
		require.Len(t, evs, 2, "read %d", i)
		require.Equal(t, verbs.EventPortErr, evs[0].Type)
		require.Equal(t, verbs.EventDeviceFatal, evs[1].Type)
		require.Equal(t, since+2, next)
	}
	_, err = e.ctx.LatestEvent()
	require.ErrorIs(t, err, unix.EIO)
	var nilCtx *verbs.Context
	_, err = nilCtx.LatestEvent()
	require.ErrorIs(t, err, verbs.ErrInvalid)
}

// TestEventsClosedAndNil: Events on a nil or closed context is refused, as every
// method of a closed object is.
func TestEventsClosedAndNil(t *testing.T) {
	var nilCtx *verbs.Context
	_, _, err := nilCtx.Events(0, nil)
	require.ErrorIs(t, err, verbs.ErrInvalid)
	require.Zero(t, nilCtx.Port())
	ctx, err := verbs.Open(verbs.SoftDeviceName)
	require.NoError(t, err)
	require.NoError(t, ctx.Close())
	_, _, err = ctx.Events(0, nil)
	require.ErrorIs(t, err, verbs.ErrClosed)
	var s *verbs.Soft
	require.ErrorIs(t, s.RaiseEvent(verbs.EventPortErr, 1, nil), verbs.ErrInvalid)
}

// TestDevicePortEvents: a port that goes down and comes back raises PORT_ERR and then
// PORT_ACTIVE on a context open on it, which Events returns with the port's number:
// on a device that raises events on demand (soft control) and on a real device where
// the machine can pull its cable ($IBCOLL_PORT_FLAP DEV down|up: the rxe VM's
// rxevm-flap takes the netdev's veth peer down and up). This is the path of
// ibv_get_async_event itself: the non-blocking fd, the acknowledgement and the
// mapping of the event's type and port.
func TestDevicePortEvents(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx := open(t, p.devA)
		_, since, err := ctx.Events(0, nil)
		require.NoError(t, err)
		var down, up func()
		if s, err := verbs.SoftControl(ctx); err == nil {
			down = func() { require.NoError(t, s.RaiseEvent(verbs.EventPortErr, ctx.Port(), nil)) }
			up = func() { require.NoError(t, s.RaiseEvent(verbs.EventPortActive, ctx.Port(), nil)) }
		} else {
			flap := os.Getenv("IBCOLL_PORT_FLAP")
			if flap == "" {
				t.Skipf("%s raises no event on demand, and $IBCOLL_PORT_FLAP names no way to take its port down (the rxe VM sets it)", p.devA)
			}
			run := func(dir string) error {
				out, err := exec.Command(flap, p.devA, dir).CombinedOutput()
				if err != nil {
					return fmt.Errorf("%s %s %s: %w: %s", flap, p.devA, dir, err, out)
				}
				return nil
			}
			restored := false
			t.Cleanup(func() {
				if !restored {
					require.NoError(t, run("up"), "bringing the port back for the tests after this one")
				}
			})
			down = func() { require.NoError(t, run("down")) }
			up = func() { require.NoError(t, run("up")); restored = true }
		}
		await := func(want verbs.AsyncEventType) verbs.AsyncEvent {
			deadline := time.Now().Add(10 * time.Second)
			for {
				var evs []verbs.AsyncEvent
				evs, since, err = ctx.Events(since, nil)
				require.NoError(t, err)
				for _, e := range evs {
					t.Logf("event %v (seq %d)", e, e.Seq)
					if e.Type == want && e.Port == ctx.Port() {
						return e
					}
				}
				require.True(t, time.Now().Before(deadline), "no %v on port %d of %s within 10 s", want, ctx.Port(), p.devA)
				time.Sleep(10 * time.Millisecond)
			}
		}
		down()
		e := await(verbs.EventPortErr)
		require.True(t, e.Type.OfPort())
		require.Zero(t, e.QPN)
		up()
		await(verbs.EventPortActive)
	})
}
