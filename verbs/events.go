package verbs

import (
	"fmt"
	"sync"
	"time"
)

// AsyncEventType is the kind of an asynchronous event of a device
// (enum ibv_event_type, ibv_get_async_event(3)).
type AsyncEventType uint8

// The event types: libibverbs' IBV_EVENT_ names (String gives them without the prefix).
const (
	EventCQErr AsyncEventType = iota + 1
	EventQPFatal
	EventQPReqErr
	EventQPAccessErr
	EventCommEst
	EventSQDrained
	EventPathMig
	EventPathMigErr
	EventDeviceFatal
	EventPortActive
	EventPortErr
	EventLIDChange
	EventPKeyChange
	EventSMChange
	EventSRQErr
	EventSRQLimitReached
	EventQPLastWQEReached
	EventClientReregister
	EventGIDChange
	EventWQFatal
	// EventOther is a type this package does not know (a newer libibverbs).
	EventOther
)

var eventNames = [...]string{"", "CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST",
	"SQ_DRAINED", "PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR", "LID_CHANGE",
	"PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED", "QP_LAST_WQE_REACHED",
	"CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL", "OTHER"}

// String is libibverbs' name without its IBV_EVENT_ prefix ("PORT_ERR").
func (t AsyncEventType) String() string {
	if t == 0 || int(t) >= len(eventNames) {
		return fmt.Sprintf("event(%d)", uint8(t))
	}
	return eventNames[t]
}

// OfQP reports whether the event names a queue pair (AsyncEvent.QPN).
func (t AsyncEventType) OfQP() bool {
	switch t {
	case EventQPFatal, EventQPReqErr, EventQPAccessErr, EventCommEst, EventSQDrained,
		EventPathMig, EventPathMigErr, EventQPLastWQEReached:
		return true
	}
	return false
}

// OfPort reports whether the event names a port (AsyncEvent.Port).
func (t AsyncEventType) OfPort() bool {
	switch t {
	case EventPortActive, EventPortErr, EventLIDChange, EventPKeyChange, EventSMChange,
		EventClientReregister, EventGIDChange:
		return true
	}
	return false
}

// QPError reports whether the event says that its queue pair went to the error
// state (its outstanding work requests complete in error).
func (t AsyncEventType) QPError() bool {
	return t == EventQPFatal || t == EventQPReqErr || t == EventQPAccessErr
}

// AsyncEvent is one asynchronous event of a device, as Context.Events returns it.
type AsyncEvent struct {
	Type AsyncEventType
	// Port is the port a port event names (OfPort), else 0.
	Port int
	// QPN is the queue pair number a queue pair event names (OfQP), else 0.
	QPN uint32
	// Seq numbers the context's events from 1 on, with no gaps.
	Seq uint64
	// At is when Events took it from the device: no later than a moment after the
	// device raised it, for a caller that asks often.
	At time.Time
}

func (e AsyncEvent) String() string {
	switch {
	case e.Type.OfPort():
		return fmt.Sprintf("%v on port %d", e.Type, e.Port)
	case e.Type.OfQP():
		return fmt.Sprintf("%v on QP %#x", e.Type, e.QPN)
	}
	return e.Type.String()
}

// EventLogLen is how many of its newest events a context keeps for Events.
const EventLogLen = 256

// eventLog is a context's events, newest EventLogLen of them, numbered.
type eventLog struct {
	mu   sync.Mutex
	ring [EventLogLen]AsyncEvent
	last uint64 // Seq of the newest; 0: none yet
	buf  []AsyncEvent
}

// Events takes the device's pending asynchronous events (ibv_get_async_event(3),
// acknowledged at once, without blocking) into the context's log and appends to dst
// those numbered after since, oldest first. It returns dst and the number of the newest
// event, which the caller passes as since next time: every caller keeps its own place,
// so that teams sharing a context each see every event. The log keeps the newest
// EventLogLen events; where a caller fell further behind, the first Seq it gets is
// more than since+1. Where reading the device fails, what was read before the failure
// comes back with the error.
//
// Nothing reads the events but this: a caller that needs to know of a port going down
// or a fatal device error asks from time to time (the transport does as it polls).
func (c *Context) Events(since uint64, dst []AsyncEvent) ([]AsyncEvent, uint64, error) {
	if c == nil {
		return dst, since, invalid("Events", "nil Context")
	}
	if err := c.rlock("Events", "context"); err != nil {
		return dst, since, err
	}
	defer c.mu.RUnlock()
	l := &c.events
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.drain(c.b)
	if since > l.last {
		return dst, l.last, invalid("Events", "since %d is past the newest event %d", since, l.last)
	}
	first := since + 1
	if l.last >= EventLogLen && first <= l.last-EventLogLen {
		first = l.last - EventLogLen + 1
	}
	for s := first; s <= l.last; s++ {
		dst = append(dst, l.ring[s%EventLogLen])
	}
	// A device that goes away queues DEVICE_FATAL and then fails every read (EIO):
	// the events read before the error come back with it.
	return dst, l.last, err
}

// LatestEvent takes the device's pending events into the log, as Events does, and
// returns the number of the newest. A caller that makes a QP notes it: an event
// numbered no higher came before the QP, and names another QP that had its number.
func (c *Context) LatestEvent() (uint64, error) {
	if c == nil {
		return 0, invalid("LatestEvent", "nil Context")
	}
	if err := c.rlock("LatestEvent", "context"); err != nil {
		return 0, err
	}
	defer c.mu.RUnlock()
	l := &c.events
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.drain(c.b)
}

// drain moves the backend's pending events into the log.
func (l *eventLog) drain(b ctxBackend) error {
	var err error
	l.buf, err = b.asyncEvents(l.buf[:0])
	now := time.Now()
	for _, e := range l.buf {
		l.last++
		e.Seq, e.At = l.last, now
		l.ring[l.last%EventLogLen] = e
	}
	return err
}

// Port is the port number of the context's queue pairs: its first active port at
// Open, else 1.
func (c *Context) Port() int {
	if c == nil {
		return 0
	}
	return c.port
}
