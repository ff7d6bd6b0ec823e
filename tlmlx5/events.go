package tlmlx5

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/verbs"
)

// A device's asynchronous events (verbs.Context.Events), read as the team polls:
// every eventPolls polls, and at the first poll after WaitEvent returned without a
// completion (coll wakes a waiting rank at least every 100 ms). What they change:
//   - DEVICE_FATAL fails every link at once, and refuses every later one and every
//     later team on the context, naming the event. A device in that state may end no
//     work request, and the collective would otherwise wait for its deadline. A read
//     that fails with EIO or ENODEV (the device went away) counts as the same.
//   - A QP error event (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR) fails that QP's link,
//     naming it: its work requests complete in error too, but say less. Only events
//     read after the QP was made name it (peer.ofQP).
//   - PORT_ERR on the port of the team's QPs is remembered until PORT_ACTIVE, and a
//     link that fails meanwhile says so: its sends end in RETRY_EXC_ERR after the
//     transport's retries, which alone would blame the peer.
// A link that fails for any cause looks at the events not read yet first
// (failureCause), since its failed completions may be polled before the event that
// explains them is read.
// Each team reads from its own place in the context's log, so that every team of a
// context sees every event.

// eventPolls: a team reads events at least every eventPolls polls, a syscall on a
// real device that costs about what a few hundred polls do.
const eventPolls = 1024

// eventState is a team's place in its context's events.
type eventState struct {
	seq      uint64             // the newest event read
	buf      []verbs.AsyncEvent // reused
	scan     []verbs.AsyncEvent // reused by failureCause
	polls    uint32             // polls since the last read
	portDown *verbs.AsyncEvent  // the PORT_ERR not yet followed by PORT_ACTIVE
	fatal    error              // DEVICE_FATAL was read: every link fails
	// due: WaitEvent returned without a completion; read at the next poll. Atomic:
	// WaitEvent runs without the team's lock.
	due atomic.Bool
}

// startEvents places a new team after the events already read, except that what
// still holds counts for it too: a port still down (its newest port event is
// PORT_ERR), and a device that reported a fatal error (newTeam then fails).
func (t *team) startEvents() {
	evs, seq, err := t.c.dev.Events(0, nil)
	t.ev.seq = seq
	t.noteEvents(evs, false)
	t.readFailed(err)
}

// checkEvents reads the events that came since the last read, and acts on them.
func (t *team) checkEvents() {
	t.ev.polls = 0
	evs, seq, err := t.c.dev.Events(t.ev.seq, t.ev.buf[:0])
	t.ev.buf = evs[:0]
	t.ev.seq = seq
	t.noteEvents(evs, true)
	if t.readFailed(err) {
		for _, pe := range t.linked {
			t.peerFailed(pe, t.ev.fatal)
		}
		t.loopFailed(t.ev.fatal)
		t.flushLoop()
	}
}

// readFailed takes a failure to read the device's events: EIO or ENODEV means that the
// device went away (the kernel queues a DEVICE_FATAL and then fails every read), and
// counts as a fatal error; it reports whether it did. Anything else (a closed context,
// which closes only after its teams) is left alone.
func (t *team) readFailed(err error) bool {
	if err == nil || t.ev.fatal != nil || !(errors.Is(err, unix.EIO) || errors.Is(err, unix.ENODEV)) {
		return false
	}
	t.ev.fatal = fmt.Errorf("device %s: reading its events failed, it is gone: %w", t.c.dev.Name(), err)
	return true
}

// noteEvents records evs, and acts on them where act is set (a new team has no link
// to fail yet).
func (t *team) noteEvents(evs []verbs.AsyncEvent, act bool) {
	port := t.c.dev.Port()
	for i := range evs {
		e := evs[i]
		switch {
		case portEvent(e, port, &t.ev.portDown):
		case e.Type == verbs.EventDeviceFatal:
			if t.ev.fatal == nil {
				t.ev.fatal = t.fatalError(e)
			}
			if act {
				for _, pe := range t.linked {
					t.peerFailed(pe, t.ev.fatal)
				}
				t.loopFailed(t.ev.fatal)
				t.flushLoop()
			}
		case act && e.Type.QPError():
			for _, pe := range t.linked {
				if pe.ofQP(e) {
					t.peerFailed(pe, t.qpError(e, nil))
				}
			}
			if t.lp.ofQP(e) {
				t.loopFailed(t.qpError(e, nil))
				t.flushLoop()
			}
		}
	}
}

// portEvent applies e to down, the PORT_ERR of port not yet followed by PORT_ACTIVE,
// and reports whether e was a port event of port that changes it.
func portEvent(e verbs.AsyncEvent, port int, down **verbs.AsyncEvent) bool {
	switch {
	case e.Type == verbs.EventPortErr && e.Port == port:
		*down = &e
	case e.Type == verbs.EventPortActive && e.Port == port:
		*down = nil
	default:
		return false
	}
	return true
}

// ofQP reports whether e names pe's QP: its number, and read after the QP was made. A
// QP number comes back into use once its QP is destroyed, and the context's log may
// still hold an event of the old QP that this team has not read yet.
func (pe *peer) ofQP(e verbs.AsyncEvent) bool {
	return pe.qp != nil && pe.qp.QPN() == e.QPN && e.Seq > pe.evFloor
}

func (t *team) fatalError(e verbs.AsyncEvent) error {
	return fmt.Errorf("device %s reported a fatal error (async event %v)", t.c.dev.Name(), e.Type)
}

func (t *team) qpError(e verbs.AsyncEvent, err error) error {
	if err == nil {
		return fmt.Errorf("device %s reported %v", t.c.dev.Name(), e)
	}
	return fmt.Errorf("device %s reported %v; %w", t.c.dev.Name(), e, err)
}

// failureCause is err, the failure of pe's link, with what the device's events say of
// it: a fatal device error or an error event of pe's QP that came before (its work
// requests fail too, and may be polled before the event is read), and a port that was
// down. It looks at the events that came since the last read without taking them; the
// next Poll acts on them.
func (t *team) failureCause(pe *peer, err error) error {
	if errors.Is(err, t.ev.fatal) && t.ev.fatal != nil {
		return err
	}
	portDown := t.ev.portDown
	// Events that come with a read's error (a gone device's DEVICE_FATAL) count too.
	evs, _, _ := t.c.dev.Events(t.ev.seq, t.ev.scan[:0])
	t.ev.scan = evs[:0]
	if len(evs) > 0 {
		t.ev.due.Store(true)
		port := t.c.dev.Port()
		for i := range evs {
			ev := evs[i]
			switch {
			case portEvent(ev, port, &portDown):
			case ev.Type == verbs.EventDeviceFatal:
				return fmt.Errorf("%w; %w", t.fatalError(ev), err)
			case ev.Type.QPError() && pe.ofQP(ev):
				err = t.qpError(ev, err)
			}
		}
	}
	if portDown != nil {
		return fmt.Errorf("%w (port %d of %s went down %v before: async event %v)",
			err, portDown.Port, t.c.dev.Name(), time.Since(portDown.At).Round(time.Millisecond), portDown.Type)
	}
	return err
}
