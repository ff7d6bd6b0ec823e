package verbs

import "time"

// Soft is the control surface of a soft0 context: the faults and delays
// that let tests prove no failure turns into a hang. It lives apart from
// the production types so that nothing a real provider serves carries a
// test hook, and so that code which fences peers in production (with
// QP.MoveToError) cannot be mistaken for fault injection.
//
// A Soft acts on its context's operations, except SetDMCapacity, which
// acts on soft0 itself: every soft0 context shares the one device, as
// processes share a NIC. Methods fail with ErrClosed once the context is
// closed. A Soft is safe for concurrent use.
type Soft struct {
	c *Context
	s *softCtx
}

// SoftControl returns the control surface of c, which must be a soft0
// context. Contexts of real devices have none: the error wraps
// ErrNotSupported.
func SoftControl(c *Context) (*Soft, error) {
	if c == nil {
		return nil, invalid("SoftControl", "nil Context")
	}
	s, ok := c.b.(*softCtx)
	if !ok {
		return nil, newError("SoftControl", ErrNotSupported, "context "+c.info.Name+" is not on "+SoftDeviceName+": only the soft provider injects faults")
	}
	return &Soft{c: c, s: s}, nil
}

// FaultKind names an operation that Soft.FailNth can fail.
type FaultKind uint8

const (
	// FaultRegMR fails PD.RegMR, PD.RegMRAddr or PD.RegDMMR.
	FaultRegMR FaultKind = iota + 1
	// FaultAllocDM fails Context.AllocDM.
	FaultAllocDM
	// FaultCreateQP fails PD.CreateQP.
	FaultCreateQP
	// FaultAllocPD fails Context.AllocPD.
	FaultAllocPD
	// FaultCreateCQ fails Context.CreateCQ.
	FaultCreateCQ
	// FaultPostSend refuses a work request given to QP.PostSend, counting
	// requests, not calls: the ones before it in its chain are posted and
	// complete, as when a provider's send queue fills mid-chain, and the
	// error says how many (PostedBefore).
	FaultPostSend
	// FaultDeregMR fails MR.Close (ibv_dereg_mr): the MR stays registered, and a
	// retried Close deregisters it. (Audit hook: no other way to make a release fail.)
	FaultDeregMR
	// FaultFreeDM fails DM.Close (ibv_free_dm): the memory stays allocated, and a
	// retried Close frees it. (Audit hook, as FaultDeregMR.)
	FaultFreeDM
)

// String returns the name that injected errors carry.
func (k FaultKind) String() string {
	switch k {
	case FaultRegMR:
		return "reg-mr"
	case FaultAllocDM:
		return "alloc-dm"
	case FaultCreateQP:
		return "create-qp"
	case FaultAllocPD:
		return "alloc-pd"
	case FaultCreateCQ:
		return "create-cq"
	case FaultPostSend:
		return "post-send"
	case FaultDeregMR:
		return "dereg-mr"
	case FaultFreeDM:
		return "free-dm"
	}
	return "fault?"
}

// FailNth makes the nth next operation of kind on the context fail (n=1
// is the next one) with an error wrapping ErrInjected and ENOMEM, the
// errno a provider out of resources gives. It fails once; a later call
// replaces a fault not yet reached.
func (s *Soft) FailNth(kind FaultKind, n int) error {
	const op = "FailNth"
	if s == nil || s.c == nil {
		return invalid(op, "nil or zero Soft: SoftControl makes one")
	}
	if kind < FaultRegMR || kind > FaultFreeDM {
		return invalid(op, "unknown fault kind %d", kind)
	}
	if n < 1 {
		return invalid(op, "n must be >= 1, got %d", n)
	}
	if err := s.c.rlock(op, "context"); err != nil {
		return err
	}
	defer s.c.mu.RUnlock()
	s.s.fmu.Lock()
	s.s.faults[kind] = n
	if kind == FaultPostSend {
		s.s.postArmed.Store(true)
	}
	s.s.fmu.Unlock()
	return nil
}

// BreakQP moves qp, a QP of this context, to the error state as a failed
// link or NIC would: its outstanding work is flushed and its peer's
// requests fail. Tests use it to break a connection from outside the
// code under test; that code's own fence is QP.MoveToError.
func (s *Soft) BreakQP(qp *QP) error {
	const op = "BreakQP"
	if s == nil || s.c == nil {
		return invalid(op, "nil or zero Soft: SoftControl makes one")
	}
	if qp == nil || qp.pd == nil {
		return invalid(op, "qp is nil or a zero QP")
	}
	if qp.pd.ctx != s.c {
		return invalid(op, "qp %#x belongs to another context", qp.num)
	}
	if err := qp.rlock(op, "QP"); err != nil {
		return err
	}
	defer qp.mu.RUnlock()
	return qp.b.toError()
}

// RaiseEvent makes the context's device raise an asynchronous event of type t, which
// Context.Events then returns: a device or port event (t.OfQP false; port is the port
// a port event names, soft0's only port being 1), or, with qp, that QP's event. An
// event that says a QP failed (t.QPError) moves qp to the error state first, as the
// device would have. Nothing else changes: a DEVICE_FATAL or PORT_ERR leaves the QPs
// working, the worst case for a caller, which must not wait for completions that such
// a device may never give.
func (s *Soft) RaiseEvent(t AsyncEventType, port int, qp *QP) error {
	const op = "RaiseEvent"
	if s == nil || s.c == nil {
		return invalid(op, "nil or zero Soft: SoftControl makes one")
	}
	if t == 0 || t >= EventOther {
		return invalid(op, "t is not an event type (%d)", uint8(t))
	}
	e := AsyncEvent{Type: t}
	switch {
	case t.OfQP():
		if qp == nil || qp.pd == nil {
			return invalid(op, "a %v event needs its qp", t)
		}
		if qp.pd.ctx != s.c {
			return invalid(op, "qp %#x belongs to another context", qp.num)
		}
		e.QPN = qp.num
		if t.QPError() {
			if err := s.BreakQP(qp); err != nil {
				return err
			}
		}
	case t.OfPort():
		if port != 1 {
			return invalid(op, "port is %d: soft0 has port 1 only", port)
		}
		e.Port = port
	}
	if err := s.c.rlock(op, "context"); err != nil {
		return err
	}
	defer s.c.mu.RUnlock()
	s.s.emu.Lock()
	s.s.pending = append(s.s.pending, e)
	s.s.emu.Unlock()
	return nil
}

// Disassociate makes the context's device go away as the kernel tells a process of a
// removed device: a DEVICE_FATAL event, after which every read of events fails with
// EIO. The QPs keep working, as for RaiseEvent's DEVICE_FATAL.
func (s *Soft) Disassociate() error {
	const op = "Disassociate"
	if s == nil || s.c == nil {
		return invalid(op, "nil or zero Soft: SoftControl makes one")
	}
	if err := s.c.rlock(op, "context"); err != nil {
		return err
	}
	defer s.c.mu.RUnlock()
	s.s.emu.Lock()
	s.s.pending = append(s.s.pending, AsyncEvent{Type: EventDeviceFatal})
	s.s.gone = true
	s.s.emu.Unlock()
	return nil
}

// DelayCompletions delays every later completion of the context's QPs by
// d, to imitate a slow peer; 0 removes the delay. While a delay is set,
// requests run on the QP's worker, never on the posting goroutine.
func (s *Soft) DelayCompletions(d time.Duration) error {
	const op = "DelayCompletions"
	if s == nil || s.c == nil {
		return invalid(op, "nil or zero Soft: SoftControl makes one")
	}
	if d < 0 {
		return invalid(op, "d must be >= 0, got %v", d)
	}
	if err := s.c.rlock(op, "context"); err != nil {
		return err
	}
	defer s.c.mu.RUnlock()
	s.s.delay.Store(int64(d))
	return nil
}

// SetDMCapacity sets soft0's device-memory capacity to n bytes and
// returns the previous capacity, so that a test can restore it. Capacity
// 0 makes AllocDM answer ErrNotSupported, as a device without device
// memory (rxe) does. Memory already allocated stays allocated. The
// capacity is the device's, shared by every soft0 context; it starts at
// DefaultSoftDMCapacity.
func (s *Soft) SetDMCapacity(n int) (prev int, err error) {
	const op = "SetDMCapacity"
	if s == nil || s.c == nil {
		return 0, invalid(op, "nil or zero Soft: SoftControl makes one")
	}
	if n < 0 {
		return 0, invalid(op, "n must be >= 0, got %d", n)
	}
	if err := s.c.rlock(op, "context"); err != nil {
		return 0, err
	}
	defer s.c.mu.RUnlock()
	d := s.s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	prev, d.dmCap = d.dmCap, n
	return prev, nil
}

// Pulled returns how many bytes of writes with immediate into mr its owner's poller
// copied itself (memory registered with HintOwnerReads, writes of 32-256 KiB posted
// on their own, when the owner polled its receive CQ within 10 µs): what lets a test
// see which way its writes went. mr must be an MR of this context.
func (s *Soft) Pulled(mr *MR) (int64, error) {
	m, err := s.softMR("Pulled", mr)
	if err != nil {
		return 0, err
	}
	defer s.c.mu.RUnlock()
	return m.pulled.Load(), nil
}

// softMR checks mr and read-locks the context, which the caller unlocks on success:
// a closed context fails with ErrClosed, as every method of Soft does.
func (s *Soft) softMR(op string, mr *MR) (*softMR, error) {
	if s == nil || s.c == nil {
		return nil, invalid(op, "nil or zero Soft: SoftControl makes one")
	}
	if mr == nil {
		return nil, invalid(op, "nil MR")
	}
	m, ok := mr.b.(*softMR)
	if !ok || m.pd.ctx != s.s {
		return nil, invalid(op, "the MR is not one of this soft0 context's")
	}
	if err := s.c.rlock(op, "context"); err != nil {
		return nil, err
	}
	return m, nil
}

// Streamed returns how many bytes soft0 has written into mr through its non-temporal
// copy (host memory pinned for CUDA, memory registered with HintOwnerReads; within that
// copy, pieces under 1 KiB are plain stores): what lets a test see which way its
// writes went. mr must be an MR of this context.
func (s *Soft) Streamed(mr *MR) (int64, error) {
	m, err := s.softMR("Streamed", mr)
	if err != nil {
		return 0, err
	}
	defer s.c.mu.RUnlock()
	return m.streamed.Load(), nil
}
