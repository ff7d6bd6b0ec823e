package asym

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
)

// UserBuf is a user's buffer as the collective received it: an address, which may be a
// device pointer, its memory type and its length in bytes. Buf, when set, is the
// mem.Buffer behind it; copies then go through mem.Copy, the only way to reach device
// memory (DM), which has no address.
type UserBuf struct {
	Addr uintptr
	Type mem.Type
	Len  int
	Buf  *mem.Buffer
}

// UserBufOf describes a whole mem.Buffer.
func UserBufOf(b *mem.Buffer) UserBuf {
	return UserBuf{Addr: b.Addr(), Type: b.Type(), Len: b.Len(), Buf: b}
}

// Registrar registers a scratch buffer with the transport, which keeps asym free of the
// transport's types. Closing the registration deregisters the buffer. A failed Register
// must leave nothing to release. Register runs under the stage's lock: it must not call
// the stage's methods.
type Registrar interface {
	Register(buf *mem.Buffer) (io.Closer, error)
}

// AllocFunc allocates a scratch buffer; mem.Alloc is the default.
type AllocFunc func(t mem.Type, size int) (*mem.Buffer, error)

// FreeFunc releases a scratch buffer that AllocFunc made, once it is
// deregistered; (*mem.Buffer).Close is the default.
type FreeFunc func(*mem.Buffer) error

type options struct {
	alloc     AllocFunc
	free      FreeFunc
	faults    *fault.Set
	getStream func() (*mem.Stream, error)
	putStream func(*mem.Stream) error
	pipeMin   int
}

// WithStreams makes the stage take the copy streams of its early copy-outs from get and
// hand them back to put once their copies are done, instead of creating and closing
// one per post: a CUDA stream costs tens of microseconds to make.
func WithStreams(get func() (*mem.Stream, error), put func(*mem.Stream) error) Option {
	return func(o *options) {
		if get != nil && put != nil { // nil: the default
			o.getStream, o.putStream = get, put
		}
	}
}

// Option configures NewStage. The functions an Option gives the stage (alloc, free,
// streams) run under the stage's lock, as Registrar.Register does: they must not call
// the stage's methods.
type Option func(*options)

// WithAlloc makes NewStage allocate scratch buffers with f instead of mem.Alloc (nil:
// mem.Alloc).
func WithAlloc(f AllocFunc) Option {
	return func(o *options) {
		if f != nil {
			o.alloc = f
		}
	}
}

// WithFree makes the stage hand its deregistered scratch buffers to f
// instead of closing them, so that a caller can keep them for reuse (nil: Close them).
func WithFree(f FreeFunc) Option {
	return func(o *options) {
		if f != nil {
			o.free = f
		}
	}
}

// WithFaults makes the stage count its allocations, registrations and copies on f
// (fault.Alloc, fault.Reg, fault.CopyIn, fault.CopyOut) and fail those f chooses.
func WithFaults(f *fault.Set) Option { return func(o *options) { o.faults = f } }

// side is one buffer of a stage: the user's, and its scratch when staged.
type side struct {
	name    string
	plan    Scratch
	user    UserBuf
	scratch *mem.Buffer
	reg     io.Closer
	release FreeFunc
	pinNote string // why a host scratch beside CUDA memory is not pinned
	pipeMin int    // pipelined copy-in from this many bytes (0: never)

	// out, when set, holds the posts' output in place of scratch (SetOutput);
	// alternate says some post's did, and outPinned whether the last such buffer was
	// pinned (asked then: the report outlives the buffer, which is the transport's).
	out       *mem.Buffer
	alternate bool
	outPinned bool

	// Per post: the copy-out that Landed started early.
	stream *mem.Stream
	early  []Span // scratch ranges already queued for copy-out
	pend   []Span // ranges landed but not queued yet, in offset order, adjacent ones joined: each shorter than a copy of its own
	rest   []Span // Complete's list of what was not queued early, kept for its backing array
	lateEr error  // a Landed copy that could not be queued
	landed bool   // some block was copied out as it landed
	// rowCopies counts the copies of several rows at once, over all posts (rows.go)
	rowCopies int64
}

// Stage carries out a Staging for one persistent collective: it owns the scratch
// buffers and their registrations from NewStage to Close. A Stage belongs to the
// top-level request, never to its sub-tasks. All its methods are safe for concurrent
// use; none waits for a post to complete.
type Stage struct {
	mu sync.Mutex
	// Used without mu (Ready and CopyingIn read pipe, a pipelined copy-in adds to
	// copied): Init resets them with atomic stores, not with the rest.
	copied atomic.Int64 // bytes copied in and out, over all posts
	pipe   atomic.Pointer[copyIn]
	// stageState is all the rest, apart so that Init can reset it under mu.
	stageState
}

type stageState struct {
	sides    [2]side // src, dst: the order of creation
	inFlight bool
	closed   bool
	posts    int

	opts     options // what Init was given
	made     bool    // Init ran: a Stage not closed since holds scratch
	earlyMin int     // defaultEarlyMin; tests lower it
	batchMin int     // defaultBatchMin; tests lower it
	// The output's blocks as rows (SetRows, rows.go): pitch and count, 0 when not
	// set; per post, the bytes of each row queued for copy-out, and a scratch list of
	// the landed bytes from there on.
	rowPitch, rowCount int
	fronts, avail      []int
	bars               []bar  // bestRect's stack
	cut                []Span // the landed list's spare backing array (queueRows)
	tr                 stageTrace
}

// defaultEarlyMin is the smallest scratch whose blocks are copied out as they land: below it,
// one copy at completion costs less than a queued copy per block and a wait.
const defaultEarlyMin = 256 << 10

// defaultBatchMin is the shortest run of adjacent landed bytes whose copy-out is
// queued before the post completes: each queued copy costs a driver call of some
// 5-10 µs, taken under the driver's lock that every rank of the process contends for,
// so eight 64 KiB blocks copied one by one cost more than one copy of all of them
// (measured on an H200: BenchmarkStagedSideBySide, coll).
const defaultBatchMin = 1 << 20

// NewStage allocates and registers the scratch buffers that plan needs, source first.
// src and dst are the user's buffers; one that the collective does not use on this rank
// may be zero. reg may be nil only when nothing is staged. On failure NewStage releases
// what it made, in reverse order, and returns no Stage; the error names anything that
// could not be released.
func NewStage(plan Staging, src, dst UserBuf, reg Registrar, opts ...Option) (*Stage, error) {
	s := new(Stage)
	if err := s.Init(plan, src, dst, reg, opts...); err != nil {
		return nil, err
	}
	return s, nil
}

// Init makes s, a zero Stage or one that was closed, what NewStage makes, in place:
// a caller that embeds its Stage in an object it reuses (coll's Team.Run) stages a
// repeated collective without allocating. On failure s is left closed, as a Stage
// that NewStage released.
func (s *Stage) Init(plan Staging, src, dst UserBuf, reg Registrar, opts ...Option) error {
	if s == nil {
		return invalid("Stage.Init: nil Stage")
	}
	for i, opt := range opts {
		if opt == nil {
			return invalid("Stage.Init: opts[%d] is nil", i)
		}
	}
	// Init holds mu throughout, so that two concurrent Inits of one Stage cannot both
	// find it free and make scratch, nor another method see it half made.
	s.mu.Lock()
	defer s.mu.Unlock()
	// A Close that could not release everything keeps it for a retry: still busy.
	busy := s.made && (!s.closed || s.sides[0].holds() || s.sides[1].holds())
	if busy {
		return invalid("Stage.Init: the stage is in use: Close it first")
	}
	lists := s.takeLists()
	s.copied.Store(0)
	s.pipe.Store(nil)
	s.stageState = stageState{
		made: true,
		opts: options{alloc: mem.Alloc, free: (*mem.Buffer).Close, getStream: mem.NewStream, putStream: (*mem.Stream).Close,
			pipeMin: DefaultPipelineMin},
		earlyMin: defaultEarlyMin,
		batchMin: defaultBatchMin,
	}
	s.tr.tune(s)
	o := &s.opts // in the Stage, so that applying the options allocates nothing
	for _, opt := range opts {
		opt(o)
	}
	s.sides = [2]side{{name: "src", plan: plan.Src, user: src, release: o.free, pipeMin: o.pipeMin},
		{name: "dst", plan: plan.Dst, user: dst, release: o.free}}
	s.giveLists(lists)
	for i := range s.sides {
		if err := s.sides[i].check(reg); err != nil {
			s.closed = true
			return err
		}
	}
	for i := range s.sides {
		if err := s.sides[i].open(o.alloc, reg, o.faults); err != nil {
			err = errors.Join(err, s.release())
			s.closed = true
			return err
		}
	}
	return nil
}

// stageLists are the backing arrays of a Stage's per-post lists, which Init carries
// over from the Stage's last use, emptied: a Stage reused for the same collective
// (coll's requests) then allocates none of them again.
type stageLists struct {
	early, pend, rest [2][]Span
	fronts, avail     []int
	bars              []bar
	cut               []Span
}

func (s *Stage) takeLists() stageLists {
	var l stageLists
	for i := range s.sides {
		sd := &s.sides[i]
		l.early[i], l.pend[i], l.rest[i] = sd.early[:0], sd.pend[:0], sd.rest[:0]
	}
	l.fronts, l.avail, l.bars, l.cut = s.fronts[:0], s.avail[:0], s.bars[:0], s.cut[:0]
	return l
}

func (s *Stage) giveLists(l stageLists) {
	for i := range s.sides {
		sd := &s.sides[i]
		sd.early, sd.pend, sd.rest = l.early[i], l.pend[i], l.rest[i]
	}
	s.fronts, s.avail, s.bars, s.cut = l.fronts, l.avail, l.bars, l.cut
}

// holds reports whether the side still has scratch, a registration or a copy stream
// that a release has not freed.
func (sd *side) holds() bool { return sd.scratch != nil || sd.reg != nil || sd.stream != nil }

// check validates one side before anything is made.
func (sd *side) check(reg Registrar) error {
	p := sd.plan
	if !p.Needed {
		return nil
	}
	if reg == nil {
		return invalid("NewStage: %s is staged but the Registrar is nil", sd.name)
	}
	if p.Bytes <= 0 {
		return invalid("NewStage: %s scratch has %d bytes", sd.name, p.Bytes)
	}
	end := 0
	for _, sp := range p.Spans {
		if sp.Off < 0 || sp.Len <= 0 || sp.Off+sp.Len > p.Bytes || sp.Off+sp.Len < 0 {
			return invalid("NewStage: %s span [%d, +%d) is outside its %d-byte scratch",
				sd.name, sp.Off, sp.Len, p.Bytes)
		}
		end = max(end, sp.Off+sp.Len)
	}
	if !p.CopyIn && !p.CopyOut {
		return nil
	}
	u := sd.user
	switch {
	case u.Buf != nil && (u.Type != u.Buf.Type() || u.Len > u.Buf.Len()):
		return invalid("NewStage: user %s says %v, %d bytes, but its Buf is %v, %d bytes",
			sd.name, u.Type, u.Len, u.Buf.Type(), u.Buf.Len())
	case u.Len < end:
		return invalid("NewStage: user %s has %d bytes, its copies reach byte %d", sd.name, u.Len, end)
	case u.Buf == nil && u.Addr == 0:
		return invalid("NewStage: user %s has no address and no Buf", sd.name)
	case u.Buf == nil && (u.Type == mem.DM || p.Type == mem.DM):
		return fmt.Errorf("asym: NewStage: copies between user %s (%v) and a %v scratch need UserBuf.Buf: %w",
			sd.name, u.Type, p.Type, mem.ErrNotSupported)
	}
	return nil
}

// open allocates and registers one side's scratch. What it made stays in sd for release.
func (sd *side) open(alloc AllocFunc, reg Registrar, f *fault.Set) error {
	p := sd.plan
	if !p.Needed {
		return nil
	}
	// Only an error names it: formatting at every Init would allocate.
	what := func() string { return fmt.Sprintf("%s scratch, %v, %d bytes", sd.name, p.Type, p.Bytes) }
	err := f.Hit(fault.Alloc)
	if err == nil {
		sd.scratch, err = alloc(p.Type, p.Bytes)
	}
	if err != nil {
		sd.scratch = nil
		return fmt.Errorf("asym: allocate %s: %w", what(), err)
	}
	if sd.scratch.Len() < p.Bytes || sd.scratch.Type() != p.Type {
		return invalid("allocate %s: got %v, %d bytes", what(), sd.scratch.Type(), sd.scratch.Len())
	}
	if sd.scratch.Type() == mem.Host && isCUDA(sd.user.Type) && (p.CopyIn || p.CopyOut) {
		// The copy engine moves pinned memory by DMA, about five times faster than
		// pageable memory, which the driver bounces through its own buffers. A
		// cached scratch stays pinned, so this costs once per buffer.
		if perr := sd.scratch.Pin(); perr != nil {
			sd.pinNote = perr.Error()
		}
	}
	if err = f.Hit(fault.Reg); err == nil {
		sd.reg, err = reg.Register(sd.scratch)
	}
	if err != nil {
		sd.reg = nil // a failed registration leaves nothing to deregister
		return fmt.Errorf("asym: register %s: %w", what(), err)
	}
	return nil
}

// free releases one side's scratch: deregister, then free. A scratch whose
// deregistration failed is kept, registration and memory, since the NIC may still reach
// it; what failed stays for the next attempt.
func (sd *side) free() error {
	if sd.reg != nil {
		if err := sd.reg.Close(); err != nil {
			return fmt.Errorf("asym: deregister %s scratch: %w", sd.name, err)
		}
		sd.reg = nil
	}
	if sd.stream != nil {
		// Complete synchronised it; a stage closed with copies queued cannot exist.
		if err := sd.stream.Close(); err != nil {
			return fmt.Errorf("asym: %s copy-out stream: %w", sd.name, err)
		}
		sd.stream = nil
	}
	if sd.scratch != nil {
		if err := sd.release(sd.scratch); err != nil {
			return fmt.Errorf("asym: free %s scratch: %w", sd.name, err)
		}
		sd.scratch = nil
	}
	return nil
}

// release frees every side in reverse order of creation.
func (s *Stage) release() error {
	dst := s.sides[1].free()
	return errors.Join(dst, s.sides[0].free())
}

// effective is what the transport uses for one side.
func (sd *side) effective() UserBuf {
	if sd.scratch == nil {
		return sd.user
	}
	return UserBuf{Addr: sd.scratch.Addr(), Type: sd.scratch.Type(), Len: sd.plan.Bytes, Buf: sd.scratch}
}

// Src returns the source buffer that the transport must use: the scratch when the source
// is staged, else the user's. It is zero after Close.
func (s *Stage) Src() UserBuf { return s.buf(0) }

// Dst returns the destination buffer that the transport must use, like Src.
func (s *Stage) Dst() UserBuf { return s.buf(1) }

// SrcRegistration returns the source scratch's registration, nil when the source is not
// staged or the Stage is closed.
func (s *Stage) SrcRegistration() io.Closer { return s.reg(0) }

// DstRegistration returns the destination scratch's registration, like SrcRegistration.
func (s *Stage) DstRegistration() io.Closer { return s.reg(1) }

func (s *Stage) buf(i int) UserBuf {
	if s == nil {
		return UserBuf{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return UserBuf{}
	}
	return s.sides[i].effective()
}

func (s *Stage) reg(i int) io.Closer {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	return s.sides[i].reg
}

// Staged reports whether any buffer goes through a scratch.
func (s *Stage) Staged() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sides[0].scratch != nil || s.sides[1].scratch != nil
}

// CopyIn starts a post: it copies the user's input into every scratch that copies in,
// then marks the post in flight. The request layer calls it at every post, after it found
// the request re-postable, before the transport starts. It fails with ErrBusy while the
// previous post is in flight and with ErrClosed after Close; a failed copy leaves no post
// in flight.
func (s *Stage) CopyIn() error {
	if s == nil {
		return invalid("CopyIn: nil Stage")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fmt.Errorf("asym: CopyIn: %w", ErrClosed)
	case s.inFlight:
		return fmt.Errorf("asym: CopyIn: the previous post has not completed: %w", ErrBusy)
	}
	s.tr.begin(s)
	s.tr.mark('P', 0, 0)
	clear(s.fronts)
	for i := range s.sides {
		sd := &s.sides[i]
		if sd.scratch == nil || !sd.plan.CopyIn {
			continue
		}
		if i == 0 && sd.pipelined() {
			ci, err := sd.startCopyIn(s.opts.faults, &s.copied)
			if err != nil {
				return err
			}
			s.pipe.Store(ci)
			continue
		}
		n, err := sd.copy(true, s.opts.faults, sd.plan.Spans)
		s.copied.Add(n)
		if err != nil {
			return errors.Join(err, s.joinCopyIn())
		}
	}
	s.inFlight = true
	s.tr.mark('I', 0, 0)
	s.posts++
	return nil
}

// Complete ends the post in flight with the transport's result err. On success it copies
// every scratch that copies out into the user's buffer, and returns the failures of
// those copies, which fails the request; on failure it copies nothing and returns err.
// Either way the post is no longer in flight.
func (s *Stage) Complete(err error) error {
	if s == nil {
		return errors.Join(err, invalid("Complete: nil Stage"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inFlight {
		return invalid("Complete: no post in flight")
	}
	s.inFlight = false
	s.tr.mark('C', 0, 0)
	if perr := s.joinCopyIn(); perr != nil && err == nil {
		err = perr // the transport may have stopped at the missing bytes
	}
	// Copies that Landed queued finish first, whatever the outcome: the scratch may
	// be reused, and nothing may write the user's buffer after Complete returns.
	// Ranges it held back go out with them on success, and are dropped on failure.
	for i := range s.sides {
		sd := &s.sides[i]
		if err == nil && sd.stream != nil {
			// Copies are queued already: the held-back ranges follow them on
			// that stream, in offset order, adjacent ones as one copy. Where none
			// was queued, the held-back ranges are left to the synchronous copy
			// below, as if they never landed: one call that waits for its copy,
			// where queueing would cost a stream, a call and a wait (a 512 KiB
			// copy-out took 35-50 µs queued on an H200, 18 µs synchronously).
			s.queueLanded(sd, sd.pend, false)
		}
		sd.pend = sd.pend[:0]
	}
	var errs []error
	for i := range s.sides {
		if e := s.sides[i].settleEarly(s.opts.putStream); e != nil {
			errs = append(errs, e)
		}
	}
	s.tr.mark('S', 0, 0)
	if err != nil {
		for i := range s.sides {
			s.sides[i].early = s.sides[i].early[:0]
		}
		s.tr.end(s)
		return err
	}
	s.tr.mark('s', 0, 0)
	for i := range s.sides {
		sd := &s.sides[i]
		if sd.scratch == nil || !sd.plan.CopyOut {
			continue
		}
		sd.rest = minus(sd.rest[:0], sd.plan.Spans, sd.early)
		rest := sd.rest
		sd.early = sd.early[:0]
		n, err := sd.copy(false, s.opts.faults, rest)
		s.copied.Add(n)
		if err != nil {
			errs = append(errs, err)
		}
	}
	s.tr.end(s)
	return errors.Join(errs...)
}

// Landed tells the stage that the transport has written output bytes (the destination's;
// the source's where it is the output, as in bcast) [off, off+n) of
// the post in flight: the part of them that copies out is held until the landed
// ranges it touches form one run of adjacent bytes of at least defaultBatchMin,
// which is then queued as one copy, so the copy-out of blocks overlaps the arrival of
// later ones; where SetRows set the output's blocks as rows, rectangles of several
// rows go as one copy instead (rows.go). Complete copies what is left, and what never
// landed. Calls outside a post, or for a destination that does not copy out, do
// nothing. It does not wait for the copy it queues, except from a host scratch that
// could not be pinned into CUDA memory (pinNote): mem copies from pageable memory
// through its bounce buffers and returns once done.
//
// Runs, not a byte count, decide: a gather root's blocks land in pieces, interleaved
// across senders, and a batch of whatever had landed was up to four non-adjacent
// 256 KiB copies per MiB. Each is a driver call of 5-10 µs on the thread that polls
// the transport, and a copy whose fixed cost the copy engine pays again (on an H200 a
// 256 KiB copy took 12-13 µs, a 1 MiB one 27 µs): an 8-rank 1 MiB host,cuda gather's
// root finished its transport part after about 400 µs against host,host's 250, and
// waited another 130-150 µs for the copies.
func (s *Stage) Landed(off, n int) {
	if s == nil || n <= 0 || off < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sd := s.outSide()
	if !s.inFlight || s.closed || sd.scratch == nil || !sd.plan.CopyOut || sd.lateEr != nil || sd.plan.Bytes < s.earlyMin {
		return
	}
	// A range reported again is copied again: the stream keeps the copies in order,
	// so the user's buffer ends with the last bytes written, whatever the
	// algorithm rewrote.
	s.tr.mark('L', off, n)
	had := len(sd.pend)
	sd.pend = intersect(sd.pend, sd.plan.Spans, Span{Off: off, Len: n})
	if len(sd.pend) == had {
		return
	}
	sd.pend = coalesce(sd.pend)
	if s.rowCount > 0 {
		s.queueRows(sd)
		return
	}
	kept := sd.pend[:0]
	for _, sp := range sd.pend {
		if sp.Len >= s.batchMin {
			s.queueLanded(sd, []Span{sp}, true)
			continue
		}
		kept = append(kept, sp)
	}
	sd.pend = kept
}

// queueLanded queues the copy-out of landed ranges, in the order they were reported, a
// run of adjacent ones as one copy; early says the post is still running (the report's
// "copy-out as blocks land").
func (s *Stage) queueLanded(sd *side, todo []Span, early bool) {
	if len(todo) == 0 || sd.lateEr != nil || !s.copyStream(sd) {
		return
	}
	u, sc := sd.user, sd.outBuf()
	for i := 0; i < len(todo); {
		sp := todo[i]
		for i++; i < len(todo) && todo[i].Off == sp.Off+sp.Len; i++ {
			sp.Len += todo[i].Len
		}
		s.tr.mark('q', sp.Off, sp.Len)
		var err error
		if u.Buf != nil {
			err = mem.CopyAsync(sd.stream, u.Buf, sp.Off, sc, sp.Off, sp.Len)
		} else {
			err = mem.CopyPtrAsync(sd.stream, u.Addr+uintptr(sp.Off), u.Type, sc.Addr()+uintptr(sp.Off), sc.Type(), sp.Len)
		}
		if err != nil {
			// Complete copies what did not land: a failed queueing loses nothing.
			sd.lateEr = err
			return
		}
		s.tr.mark('Q', sp.Off, sp.Len)
		sd.early = append(sd.early, sp)
		sd.landed = sd.landed || early
		s.copied.Add(int64(sp.Len))
	}
}

// outSide is the side whose scratch the transport writes the output into.
func (s *Stage) outSide() *side {
	if sd := &s.sides[1]; sd.plan.CopyOut {
		return sd
	}
	return &s.sides[0] // bcast: a non-root's output is its Src
}

// copyStream makes sure sd has the stream of its early copy-outs, and reports whether
// it has; a stream that cannot be had is a late error (Complete then copies
// synchronously).
func (s *Stage) copyStream(sd *side) bool {
	if sd.stream == nil {
		st, err := s.opts.getStream()
		if err != nil {
			sd.lateEr = err
			return false
		}
		sd.stream = st
	}
	return true
}

// settleEarly waits for the copies Landed queued and reports their failure as a
// failed copy-out.
func (sd *side) settleEarly(put func(*mem.Stream) error) error {
	sd.lateEr = nil
	if sd.stream == nil {
		return nil
	}
	err := sd.stream.Synchronize()
	if perr := put(sd.stream); perr != nil && err == nil {
		err = perr
	}
	sd.stream = nil
	if err != nil {
		sd.early = sd.early[:0]
		return sd.copyError(false, err)
	}
	return nil
}

// SetOutput names the buffer that holds the output of the posts to come in place of the
// output side's scratch (Dst's; Src's where it is the output, as in bcast), or the
// scratch again when b is nil: a transport that writes a persistent collective's output
// into buffers of its own, one per post parity, so that peers may write a post before
// it starts (coll's driver.OutputOwner), names the post's before CopyIn starts it. The
// copy-out reads b, as the scratch: it must be of the scratch's type and hold its
// bytes. It refuses while a post is in flight, and where no output is copied out.
func (s *Stage) SetOutput(b *mem.Buffer) error {
	if s == nil {
		return invalid("SetOutput: nil Stage")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sd := s.outSide()
	switch {
	case s.inFlight:
		return fmt.Errorf("asym: SetOutput: a post is in flight: %w", ErrBusy)
	case s.closed:
		return fmt.Errorf("asym: SetOutput: %w", ErrClosed)
	case b == nil:
		sd.out = nil
		return nil
	case sd.scratch == nil || !sd.plan.CopyOut:
		return invalid("SetOutput: no output of this stage is copied out")
	case b.Type() != sd.scratch.Type() || b.Len() < sd.plan.Bytes:
		return invalid("SetOutput: the output is %v, %d bytes; the %s scratch it stands for is %v, %d bytes",
			b.Type(), b.Len(), sd.name, sd.scratch.Type(), sd.plan.Bytes)
	}
	sd.out, sd.alternate, sd.outPinned = b, true, b.Pinned()
	return nil
}

// outBuf is what the copy-out reads: the scratch, or the buffer SetOutput named.
func (sd *side) outBuf() *mem.Buffer {
	if sd.out != nil {
		return sd.out
	}
	return sd.scratch
}

// InFlight reports whether a post is in flight.
func (s *Stage) InFlight() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// copy moves spans (planned ones) between the user's buffer and the scratch: into the
// scratch when in, out of it otherwise.
func (sd *side) copy(in bool, f *fault.Set, spans []Span) (copied int64, _ error) {
	kind := fault.CopyOut
	if in {
		kind = fault.CopyIn
	}
	if err := f.Hit(kind); err != nil {
		return 0, sd.copyError(in, err)
	}
	u, sc := sd.user, sd.scratch
	if !in {
		sc = sd.outBuf()
	}
	for _, sp := range spans {
		var err error
		switch {
		case u.Buf != nil && in:
			err = mem.Copy(sc, sp.Off, u.Buf, sp.Off, sp.Len)
		case u.Buf != nil:
			err = mem.Copy(u.Buf, sp.Off, sc, sp.Off, sp.Len)
		case in:
			err = mem.CopyPtr(sc.Addr()+uintptr(sp.Off), sc.Type(), u.Addr+uintptr(sp.Off), u.Type, sp.Len)
		default:
			err = mem.CopyPtr(u.Addr+uintptr(sp.Off), u.Type, sc.Addr()+uintptr(sp.Off), sc.Type(), sp.Len)
		}
		if err != nil {
			return copied, sd.copyError(in, err)
		}
		copied += int64(sp.Len)
	}
	return copied, nil
}

// copyError is off the hot path: it allocates only when a copy failed.
func (sd *side) copyError(in bool, err error) error {
	if in {
		return fmt.Errorf("asym: copy-in of %s (user %v to %v scratch, %d bytes): %w",
			sd.name, sd.user.Type, sd.plan.Type, sd.plan.Bytes, err)
	}
	return fmt.Errorf("asym: copy-out of %s (%v scratch to user %v, %d bytes): %w",
		sd.name, sd.plan.Type, sd.user.Type, sd.plan.Bytes, err)
}

// Close releases the scratch buffers, each deregistered then freed, the destination's
// first, and joins the errors. It refuses with ErrBusy while a post is in flight, and
// waits for nothing. After its first attempt the Stage takes no more posts; a Close that
// failed (a deregistration or a free) kept what it could not release and may be called
// again to retry. Once everything is released Close returns nil: it is idempotent, and
// nil-safe.
func (s *Stage) Close() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight {
		return fmt.Errorf("asym: Close: %w", ErrBusy)
	}
	s.closed = true
	for i := range s.sides {
		s.sides[i].out = nil // the transport's, which may close before the report is read
	}
	return s.release()
}
