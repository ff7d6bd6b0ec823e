package coll

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/mem"
)

type reqState uint8

const (
	sInit     reqState = iota // initialized, never posted
	sRunning                  // the TL moves data
	sAgree                    // done here (copy-out included); waiting for the others
	sStalled                  // injected stall
	sAborting                 // failed; waiting until no peer can still write here
	sDone                     // the last post finished (err says how)
)

// agreeRadix is the radix of the completion-agreement tree.
const agreeRadix = 8

// Request is one initialized collective of one rank. Its methods are safe for
// concurrent use.
type Request struct {
	t          *Team
	seq        uint64
	typ        CollType
	persistent bool
	desc       string
	alg        string // the TL's algorithm, fixed at Init
	sig        uint32
	stage      *asym.Stage
	task       TLTask
	pin        pinner
	parent     int
	children   []int

	// Per post, under t.mu.
	post          uint32
	state         reqState
	err           error // outcome of the last finished post
	failErr       error // why the post in flight fails
	stageInFlight bool
	posted        time.Time
	deadline      time.Time // zero: none
	grace         time.Time
	doneFrom      []uint32 // per child: the last post it reported done
	finFor        uint32
	acks          []uint32 // per rank: the last post it acknowledged as failed
	futureAbort   *PeerError
	flooded       uint32
	sentDone      bool
	ctxErr        error     // why Wait's ctx ended, when it did
	decideBy      time.Time // after this rank said done, how long its deadline waits for the decision
	pendingErr    error
	closed        bool
}

// pinner pins the Go memory of Slice buffers while the request lives: staging copies
// and registrations use their addresses.
type pinner struct{ p runtime.Pinner }

// Init initializes a collective on this rank. Every rank of the team must initialize
// the same collectives in the same order: the k-th Init is collective k on every rank.
// An Init that fails still takes its number and tells the other ranks that k failed,
// so that their posts of k end with an error instead of waiting.
func (t *Team) Init(a Args) (*Request, error) {
	if t == nil {
		return nil, invalid("Init", "nil Team")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("coll: Init: team: %w", ErrClosed)
	}
	if t.broken != nil {
		return nil, fmt.Errorf("coll: Init: %w", t.broken)
	}
	k := t.nextSeq.Load()
	// The wire carries 16 bits of the sequence number: an open request
	// 65536 collectives older would share its routing. Refuse before the
	// TL sees the new request, which still consumes k and is told to peers.
	var err error
	for s := range t.reqs {
		if s != k && uint16(s) == uint16(k) {
			err = fmt.Errorf("coll: Init: collective #%d is still open; close requests before 65536 more are initialized: %w", s, ErrBusy)
			break
		}
	}
	var r *Request
	if err == nil {
		r, err = t.initLocked(k, a)
	}
	if err != nil {
		if r != nil {
			r.release()
		}
		t.nextSeq.Store(k + 1)
		ps := t.pending[k]
		delete(t.pending, k)
		if ps == nil || ps.flooded < 1 {
			t.flood(k, 1, t.rank, fmt.Sprintf("init of %s failed: %v", a.Type, err), false, 0)
		}
		return nil, err
	}
	t.reqs[k] = r
	t.nextSeq.Store(k + 1)
	if pe := t.leftBefore(k); pe != nil {
		r.futureAbort = pe
	}
	if ps := t.pending[k]; ps != nil {
		delete(t.pending, k)
		r.flooded = ps.flooded
		for _, m := range ps.msgs {
			t.OnCtl(m.peer, m.msg)
		}
	}
	return r, nil
}

// initLocked builds request k. On error it may return a partial request to release.
func (t *Team) initLocked(k uint64, a Args) (*Request, error) {
	if err := t.fs.hit(FaultInit); err != nil {
		return nil, fmt.Errorf("coll: Init: %w", err)
	}
	l, err := t.layout(a)
	if err != nil {
		return nil, err
	}
	r := &Request{t: t, seq: k, typ: a.Type, persistent: a.Flags&Persistent != 0, parent: -1}
	root := 0
	if a.Type.IsRooted() {
		root = a.Root
	}
	r.parent, r.children = knomial(t.size, root, t.rank, agreeRadix)
	r.doneFrom = make([]uint32, len(r.children))
	r.acks = make([]uint32, t.size)

	src, err := r.userBuf("Src", a.Src, l.srcBytes)
	if err != nil {
		return r, err
	}
	dst, err := r.userBuf("Dst", a.Dst, l.dstBytes)
	if err != nil {
		return r, err
	}
	plan, err := asym.Plan(l.asym, t.reach)
	if err != nil {
		return r, fmt.Errorf("coll: Init: %w", err)
	}
	alloc := func(mt mem.Type, n int) (*mem.Buffer, error) {
		if err := t.fs.hit(FaultAlloc); err != nil {
			return nil, err
		}
		return t.scratch.alloc(mt, n)
	}
	r.stage, err = asym.NewStage(plan, src, dst, regWithFaults{t}, asym.WithAlloc(alloc), asym.WithFree(t.scratch.free),
		asym.WithFaults(t.afs))
	if err != nil {
		return r, fmt.Errorf("coll: Init: staging: %w", err)
	}
	spec := &TaskSpec{Seq: k, Type: a.Type, Root: root, DType: a.DType, Op: a.Op,
		InPlace: l.inPlace, Persistent: r.persistent, Alg: a.Alg}
	if spec.Alg == "" {
		spec.Alg = t.cfg.Algs[a.Type]
	}
	spec.Src = tlBuf(a.Src, r.stage.Src(), plan.Src.Needed, l.asym.Src, l.srcBytes)
	spec.Dst = tlBuf(a.Dst, r.stage.Dst(), plan.Dst.Needed, l.asym.Dst, l.dstBytes)
	r.task, err = t.tl.NewTask(spec)
	if err != nil {
		return r, fmt.Errorf("coll: Init: %s: %w", a.Type, err)
	}
	r.alg = r.task.Alg()
	r.desc = fmt.Sprintf("%v%s %v/%v count %s alg %s", a.Type, rootDesc(a), a.DType, a.Op, l.uniform, r.alg)
	h := fnv.New32a()
	h.Write([]byte(r.desc))
	r.sig = h.Sum32()
	return r, nil
}

func rootDesc(a Args) string {
	if a.Type.IsRooted() {
		return fmt.Sprintf(" root %d", a.Root)
	}
	return ""
}

// regWithFaults is the staging registrar: the TL's, with FaultReg counted.
type regWithFaults struct{ t *Team }

func (r regWithFaults) Register(b *mem.Buffer) (asym.Registration, error) {
	if err := r.t.fs.hit(FaultReg); err != nil {
		return nil, err
	}
	return r.t.tl.Register(b)
}

// layout is what Init derives from Args before staging.
type layout struct {
	asym               asym.Args
	srcBytes, dstBytes int
	inPlace            bool
	uniform            string // the element count every rank must agree on
}

// layout validates a and derives the buffers the collective uses on this rank.
func (t *Team) layout(a Args) (layout, error) {
	const op = "Init"
	n, me := t.size, t.rank
	var l layout
	if !a.Type.Valid() {
		return l, invalid(op, "Args.Type is not a valid collective (%d)", uint8(a.Type))
	}
	if a.Flags&^(InPlace|Persistent) != 0 {
		return l, invalid(op, "Args.Flags has unknown bits %#x", uint8(a.Flags&^(InPlace|Persistent)))
	}
	if a.Type.IsRooted() && (a.Root < 0 || a.Root >= n) {
		return l, invalid(op, "Args.Root is %d, want [0, %d)", a.Root, n)
	}
	l.asym = asym.Args{Coll: a.Type.asym(), Root: a.Root, Rank: me, Size: n, DtypeSize: 1}
	if a.Type == Barrier {
		return l, nil
	}
	if !a.DType.Valid() {
		return l, invalid(op, "Args.DType is not a valid datatype (%d)", uint8(a.DType))
	}
	if a.Type.IsReduction() {
		if err := CheckOp(a.Op, a.DType); err != nil {
			return l, invalid(op, "%s", strings.TrimPrefix(err.Error(), "coll: CheckOp: "))
		}
	}
	dt := a.DType.Size()
	l.asym.DtypeSize = dt
	root := me == a.Root
	inPlace := a.Flags&InPlace != 0
	if a.Type.IsRooted() && !root || a.Type == Bcast {
		inPlace = false
	}
	l.inPlace = inPlace
	l.asym.InPlace = inPlace
	l.asym.Src = asym.Buf{Type: a.Src.Type, Count: a.Src.Count, Counts: a.Src.Counts, Displs: a.Src.Displs}
	l.asym.Dst = asym.Buf{Type: a.Dst.Type, Count: a.Dst.Count, Counts: a.Dst.Counts, Displs: a.Dst.Displs}
	if a.Src.Buf != nil {
		l.asym.Src.Type = a.Src.Buf.Type()
	}
	if a.Dst.Buf != nil {
		l.asym.Dst.Type = a.Dst.Buf.Type()
	}
	count := func(name string, c int) error {
		if c < 0 {
			return invalid(op, "Args.%s.Count is negative (%d)", name, c)
		}
		return nil
	}
	vext := func(name string, b BufferDesc) (int, error) {
		if len(b.Counts) != n || len(b.Displs) != n {
			return 0, invalid(op, "Args.%s.Counts and Displs need %d entries (the team size), have %d and %d", name, n, len(b.Counts), len(b.Displs))
		}
		ext := 0
		for i := range b.Counts {
			if b.Counts[i] < 0 || b.Displs[i] < 0 {
				return 0, invalid(op, "Args.%s.Counts[%d] or Displs[%d] is negative (%d, %d)", name, i, i, b.Counts[i], b.Displs[i])
			}
			if b.Counts[i] > 0 {
				ext = max(ext, b.Displs[i]+b.Counts[i])
			}
		}
		return ext, nil
	}
	multiple := func(name string, c int) (int, error) {
		if err := count(name, c); err != nil {
			return 0, err
		}
		if c%n != 0 {
			return 0, invalid(op, "Args.%s.Count is %d, not a multiple of the team size %d", name, c, n)
		}
		return c / n, nil
	}
	var err error
	var blk int
	switch a.Type {
	case Bcast:
		if err = count("Src", a.Src.Count); err != nil {
			return l, err
		}
		l.srcBytes = a.Src.Count * dt
		l.uniform = fmt.Sprint(a.Src.Count)
	case Gather:
		switch {
		case !root:
			err = count("Src", a.Src.Count)
			blk = a.Src.Count
		case inPlace:
			blk, err = multiple("Dst", a.Dst.Count)
		default:
			if err = count("Src", a.Src.Count); err == nil && a.Dst.Count != n*a.Src.Count {
				err = invalid(op, "Args.Dst.Count is %d on the root, want team size × Args.Src.Count = %d", a.Dst.Count, n*a.Src.Count)
			}
			blk = a.Src.Count
		}
		l.srcBytes, l.dstBytes = blk*dt, n*blk*dt
		l.uniform = fmt.Sprint(blk)
	case Gatherv:
		if err = count("Src", a.Src.Count); err != nil {
			return l, err
		}
		l.srcBytes = a.Src.Count * dt
		if root {
			var ext int
			if ext, err = vext("Dst", a.Dst); err == nil && !inPlace && a.Src.Count != a.Dst.Counts[me] {
				err = invalid(op, "Args.Src.Count is %d on the root, Args.Dst.Counts[%d] is %d: they must match", a.Src.Count, me, a.Dst.Counts[me])
			}
			l.dstBytes = ext * dt
			if inPlace {
				l.srcBytes = 0
			}
		}
		l.uniform = "v"
	case Scatter:
		switch {
		case !root:
			err = count("Dst", a.Dst.Count)
			blk = a.Dst.Count
		case inPlace:
			blk, err = multiple("Src", a.Src.Count)
		default:
			if err = count("Dst", a.Dst.Count); err == nil && a.Src.Count != n*a.Dst.Count {
				err = invalid(op, "Args.Src.Count is %d on the root, want team size × Args.Dst.Count = %d", a.Src.Count, n*a.Dst.Count)
			}
			blk = a.Dst.Count
		}
		l.srcBytes, l.dstBytes = n*blk*dt, blk*dt
		l.uniform = fmt.Sprint(blk)
	case Scatterv:
		if err = count("Dst", a.Dst.Count); err != nil {
			return l, err
		}
		l.dstBytes = a.Dst.Count * dt
		if root {
			var ext int
			if ext, err = vext("Src", a.Src); err == nil && !inPlace && a.Dst.Count != a.Src.Counts[me] {
				err = invalid(op, "Args.Dst.Count is %d on the root, Args.Src.Counts[%d] is %d: they must match", a.Dst.Count, me, a.Src.Counts[me])
			}
			l.srcBytes = ext * dt
		}
		l.uniform = "v"
	case Reduce:
		c := a.Src.Count
		if root && inPlace {
			c = a.Dst.Count
		}
		if err = count("Src", c); err == nil && root && !inPlace && a.Dst.Count != c {
			err = invalid(op, "Args.Dst.Count is %d on the root, want Args.Src.Count = %d", a.Dst.Count, c)
		}
		l.srcBytes, l.dstBytes = c*dt, c*dt
		l.uniform = fmt.Sprint(c)
	case Allgather:
		if inPlace {
			blk, err = multiple("Dst", a.Dst.Count)
		} else if err = count("Src", a.Src.Count); err == nil && a.Dst.Count != n*a.Src.Count {
			err = invalid(op, "Args.Dst.Count is %d, want team size × Args.Src.Count = %d", a.Dst.Count, n*a.Src.Count)
		} else {
			blk = a.Src.Count
		}
		l.srcBytes, l.dstBytes = blk*dt, n*blk*dt
		l.uniform = fmt.Sprint(blk)
	case Allreduce:
		c := a.Dst.Count
		if err = count("Dst", c); err == nil && !inPlace && a.Src.Count != c {
			err = invalid(op, "Args.Src.Count is %d, want Args.Dst.Count = %d", a.Src.Count, c)
		}
		l.srcBytes, l.dstBytes = c*dt, c*dt
		l.uniform = fmt.Sprint(c)
	case Alltoall:
		if blk, err = multiple("Dst", a.Dst.Count); err == nil && !inPlace && a.Src.Count != a.Dst.Count {
			err = invalid(op, "Args.Src.Count is %d, want Args.Dst.Count = %d", a.Src.Count, a.Dst.Count)
		}
		l.srcBytes, l.dstBytes = n*blk*dt, n*blk*dt
		l.uniform = fmt.Sprint(blk)
	}
	if err != nil {
		return l, err
	}
	// Buffers the collective does not use on this rank are not described to asym.
	srcUsed, dstUsed := l.usage(a.Type, root)
	if !srcUsed {
		l.srcBytes = 0
		l.asym.Src = asym.Buf{Type: mem.Host}
	}
	if !dstUsed {
		l.dstBytes = 0
		l.asym.Dst = asym.Buf{Type: mem.Host}
	}
	return l, nil
}

// usage says which buffers the collective reads or writes on this rank.
func (l *layout) usage(c CollType, root bool) (src, dst bool) {
	switch {
	case c == Barrier:
		return false, false
	case c == Bcast:
		return true, false
	case c.IsRooted() && !root:
		if c == Scatter || c == Scatterv {
			return false, true
		}
		return true, false
	case l.inPlace && (c == Scatter || c == Scatterv):
		return true, false
	case l.inPlace:
		return false, true
	}
	return true, true
}

// userBuf validates one buffer that must hold need bytes and describes it to asym.
func (r *Request) userBuf(name string, d BufferDesc, need int) (asym.UserBuf, error) {
	const op = "Init"
	set := 0
	if d.Addr != 0 {
		set++
	}
	if d.Slice != nil {
		set++
	}
	if d.Buf != nil {
		set++
	}
	if set > 1 {
		return asym.UserBuf{}, invalid(op, "Args.%s sets more than one of Addr, Slice and Buf", name)
	}
	if need == 0 {
		return asym.UserBuf{Type: mem.Host}, nil
	}
	if _, err := mem.ParseType(d.Type.String()); err != nil {
		return asym.UserBuf{}, invalid(op, "Args.%s.Type is unknown (%d)", name, uint8(d.Type))
	}
	switch {
	case set == 0:
		return asym.UserBuf{}, invalid(op, "Args.%s needs %d bytes but has no memory (set Addr, Slice or Buf)", name, need)
	case d.Slice != nil:
		if d.Type != mem.Host {
			return asym.UserBuf{}, invalid(op, "Args.%s.Slice is Go memory, but Args.%s.Type is %v", name, name, d.Type)
		}
		if len(d.Slice) < need {
			return asym.UserBuf{}, invalid(op, "Args.%s.Slice has %d bytes, the collective needs %d", name, len(d.Slice), need)
		}
		r.pin.p.Pin(unsafe.SliceData(d.Slice))
		return asym.UserBuf{Addr: uintptr(unsafe.Pointer(unsafe.SliceData(d.Slice))), Type: mem.Host, Len: need}, nil
	case d.Buf != nil:
		bt := d.Buf.Type()
		if d.Type != mem.Host && d.Type != bt {
			return asym.UserBuf{}, invalid(op, "Args.%s.Type is %v but Args.%s.Buf is %v memory", name, d.Type, name, bt)
		}
		if d.Buf.Addr() == 0 && bt != mem.DM {
			return asym.UserBuf{}, invalid(op, "Args.%s.Buf is closed", name)
		}
		if d.Buf.Len() < need {
			return asym.UserBuf{}, invalid(op, "Args.%s.Buf has %d bytes, the collective needs %d", name, d.Buf.Len(), need)
		}
		return asym.UserBuf{Addr: d.Buf.Addr(), Type: bt, Len: need, Buf: d.Buf}, nil
	}
	if d.Type == mem.DM {
		return asym.UserBuf{}, invalid(op, "Args.%s is DM memory: DM has no address, pass Args.%s.Buf", name, name)
	}
	if got := mem.TypeOf(d.Addr); d.Type == mem.Host && got != mem.Host {
		return asym.UserBuf{}, invalid(op, "Args.%s.Type is host but Args.%s.Addr %#x is %v memory", name, name, d.Addr, got)
	}
	return asym.UserBuf{Addr: d.Addr, Type: d.Type, Len: need}, nil
}

// tlBuf describes the buffer the TL must use: the scratch when staged, else the user's.
func tlBuf(d BufferDesc, eff asym.UserBuf, staged bool, ab asym.Buf, bytes int) TLBuf {
	b := TLBuf{Type: eff.Type, Bytes: bytes, Count: ab.Count, Counts: ab.Counts, Displs: ab.Displs}
	if bytes == 0 {
		return b
	}
	switch {
	case staged:
		b.Buf, b.Addr, b.Bytes = eff.Buf, eff.Addr, eff.Len
	case d.Slice != nil:
		b.Slice = d.Slice[:bytes]
		b.Addr = eff.Addr
	default:
		b.Addr, b.Buf = eff.Addr, eff.Buf
	}
	return b
}

// Post starts the collective (again, for a persistent request whose last post
// succeeded). Misuse (a request in flight, a non-persistent request posted twice, a
// persistent one whose last post failed, a closed request or a broken team) returns an
// error and changes nothing. A failure of the post itself (the copy-in of a staged
// source, the transport) is returned too, and told to the peers; Wait then returns it
// once no peer can still write into this rank's buffers.
func (r *Request) Post() error {
	if r == nil {
		return invalid("Post", "nil Request")
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case r.closed:
		return fmt.Errorf("coll: Post: request: %w", ErrClosed)
	case t.broken != nil:
		return fmt.Errorf("coll: Post: %s #%d: %w", r.typ, r.seq, t.broken)
	case r.state != sInit && r.state != sDone:
		return fmt.Errorf("coll: Post: %s #%d post %d is still in flight: Wait for it first: %w", r.typ, r.seq, r.post, ErrBusy)
	case r.state == sDone && !r.persistent:
		return invalid("Post", "%s #%d was posted already: only a request initialized with Flags Persistent may be posted again", r.typ, r.seq)
	case r.state == sDone && r.err != nil:
		return invalid("Post", "%s #%d: its last post (%d) failed, and a persistent request may be posted again only after a successful post (it failed with: %v)", r.typ, r.seq, r.post, r.err)
	}
	now := time.Now()
	r.post++
	r.state = sRunning
	r.err, r.failErr = nil, nil
	r.sentDone = false
	r.decideBy = time.Time{}
	r.ctxErr = nil
	r.posted = now
	r.deadline = time.Time{}
	if to := t.cfg.Timeout; to > 0 {
		r.deadline = now.Add(to)
	}
	if r.pendingErr != nil {
		r.fail(r.pendingErr, nil)
		return r.failErr
	}
	if fa := r.futureAbort; fa != nil && fa.Post == r.post {
		r.futureAbort = nil
		r.fail(fa, nil)
		return r.failErr
	}
	if err := t.fs.hit(FaultDeadline); err != nil {
		r.deadline = now
		r.fail(r.ctxError(fmt.Errorf("%w: %w", err, context.DeadlineExceeded)), nil)
		return r.failErr
	}
	stall := t.fs.hit(FaultStall) != nil
	qperr := t.fs.hit(FaultQPErr)
	if err := r.stage.CopyIn(); err != nil {
		r.fail(err, nil)
		return r.failErr
	}
	r.stageInFlight = true
	if stall {
		r.state = sStalled
		if r.deadline.IsZero() {
			r.deadline = now.Add(DefaultTimeout)
		}
		return nil
	}
	if err := r.task.Post(r.post); err != nil {
		r.fail(err, nil)
		return r.failErr
	}
	if qperr != nil {
		// The rank knows at once what a provider reports with the next completion:
		// its queue pair is gone, and with it the team.
		if err := r.task.InjectQPError(); err != nil {
			qperr = errors.Join(qperr, err)
		}
		t.setBroken(fmt.Errorf("queue pair moved to the error state: %w", qperr))
		return r.failErr
	}
	t.progressLocked()
	return nil
}

// Test drives progress once and reports whether the last post finished, with its
// error. It never blocks.
func (r *Request) Test() (bool, error) {
	if r == nil {
		return false, invalid("Test", "nil Request")
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.closed {
		return false, fmt.Errorf("coll: Test: request: %w", ErrClosed)
	}
	if r.state == sInit {
		return false, invalid("Test", "%s #%d was never posted", r.typ, r.seq)
	}
	if r.state != sStalled {
		t.progressLocked()
	} else {
		r.advance(time.Now())
	}
	if r.state == sDone {
		return true, r.err
	}
	return false, nil
}

// Wait drives progress until the last post finished and returns its error. ctx's
// deadline, when it has one, replaces Config.Timeout for this post; when ctx ends
// first, the post fails here and this rank tells its peers. A failed post returns only
// once no peer can still write into this rank's buffers (bounded by
// Config.AbortGrace; a peer that does not answer is fenced off and the team breaks).
func (r *Request) Wait(ctx context.Context) error {
	if r == nil {
		return invalid("Wait", "nil Request")
	}
	if ctx == nil {
		return invalid("Wait", "nil context.Context")
	}
	t := r.t
	t.mu.Lock()
	switch {
	case r.closed:
		t.mu.Unlock()
		return fmt.Errorf("coll: Wait: request: %w", ErrClosed)
	case r.state == sInit:
		t.mu.Unlock()
		return invalid("Wait", "%s #%d was never posted", r.typ, r.seq)
	}
	if d, ok := ctx.Deadline(); ok && r.state != sDone && r.state != sAborting {
		r.deadline = d
	}
	t.mu.Unlock()
	return t.waitFor(ctx, r)
}

// Close releases the request: its staging scratch, its TL resources and its pinned
// memory. It refuses with ErrBusy while a post is in flight. Idempotent and nil-safe.
func (r *Request) Close() error {
	if r == nil {
		return nil
	}
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.closed {
		return nil
	}
	if r.state != sInit && r.state != sDone {
		return fmt.Errorf("coll: Close: %s #%d post %d is in flight: Wait for it first: %w", r.typ, r.seq, r.post, ErrBusy)
	}
	if err := r.release(); err != nil {
		return fmt.Errorf("coll: Close: %s #%d: %w", r.typ, r.seq, err)
	}
	// Peers may still post what this rank will now never post: a request
	// never posted, or a persistent one that could be posted again. Tell
	// them, as a failed Init does, instead of letting them wait out their
	// deadline. (A peer that closed too just acknowledges.)
	if (r.state == sInit && r.post == 0) || (r.persistent && r.state == sDone && r.err == nil) {
		t.flood(r.seq, r.post+1, t.rank, fmt.Sprintf("rank %d closed %s #%d without posting it (again)", t.rank, r.typ, r.seq), false, 0)
	}
	r.closed = true
	delete(t.reqs, r.seq)
	return nil
}

// release frees what the request holds, the TL's first (it may use the scratch).
func (r *Request) release() error {
	var errs []error
	if r.task != nil {
		if err := r.task.Close(); err != nil {
			errs = append(errs, err)
		} else {
			r.task = nil
		}
	}
	if r.task == nil && r.stage != nil {
		if err := r.stage.Close(); err != nil {
			errs = append(errs, err)
		} else {
			r.stage = nil
		}
	}
	if len(errs) == 0 {
		r.pin.p.Unpin()
	}
	return errors.Join(errs...)
}

// Seq is the request's place in the team's order of Init calls.
func (r *Request) Seq() uint64 { return r.seq }

// Alg is the algorithm the TL chose.
func (r *Request) Alg() string {
	if r == nil {
		return ""
	}
	return r.alg
}

// fail ends the post in flight with err (a local failure, or a *PeerError), tells the
// peers and starts waiting for their acknowledgements. perr is set when the failure
// came from a peer.
func (r *Request) fail(err error, _ *PeerError) {
	switch r.state {
	case sDone, sAborting, sInit:
		return
	}
	t := r.t
	r.failErr = err
	if r.stageInFlight {
		r.stageInFlight = false
		_ = r.stage.Complete(err)
	}
	if r.task != nil {
		r.task.Abort()
	}
	r.state = sAborting
	r.grace = time.Now().Add(t.cfg.AbortGrace)
	if r.flooded < r.post {
		r.flooded = r.post
		var pe *PeerError
		if errors.As(err, &pe) {
			t.flood(r.seq, r.post, pe.Rank, pe.Cause, pe.Broken, 0)
		} else {
			t.flood(r.seq, r.post, t.rank, err.Error(), errors.Is(err, ErrTeamBroken), 0)
		}
	}
	r.advance(time.Now())
}

func (r *Request) finish(err error) {
	r.state = sDone
	r.err = err
	if err != nil && !errors.Is(err, ErrInvalid) {
		var pe *PeerError
		if !errors.As(err, &pe) && !strings.HasPrefix(err.Error(), "coll:") {
			r.err = &opError{fmt.Sprintf("%s #%d post %d", r.typ, r.seq, r.post), err}
		}
	}
}

// ctxError is the error of a post whose deadline passed or whose ctx ended.
func (r *Request) ctxError(cause error) error {
	what := "timed out"
	if errors.Is(cause, context.Canceled) {
		what = "cancelled"
	}
	w := r.waiting()
	return &timeoutError{
		msg: fmt.Sprintf("coll: %s #%d post %d %s after %v on rank %d (%v)%s", r.typ, r.seq, r.post, what,
			time.Since(r.posted).Round(time.Millisecond), r.t.rank, cause, w),
		ctx: cause,
	}
}

// waiting says what the post waits for, for timeout messages.
func (r *Request) waiting() string {
	switch r.state {
	case sRunning:
		if w := r.task.Waiting(); w != "" {
			return ": waiting for " + w
		}
	case sAgree:
		var miss []string
		for i, c := range r.children {
			if r.doneFrom[i] < r.post {
				miss = append(miss, fmt.Sprint(c))
			}
		}
		if len(miss) > 0 {
			return ": waiting for completion from rank(s) " + strings.Join(miss, ",")
		}
		if r.parent >= 0 {
			return fmt.Sprintf(": waiting for the final agreement from rank %d", r.parent)
		}
	case sStalled:
		return ": stalled (injected)"
	}
	return ""
}

// wakeAt is when the post must be looked at even if nothing happens.
func (r *Request) wakeAt() time.Time {
	switch {
	case r.state == sAborting:
		// Past the grace the abort waits only for the TL to drain (fenced
		// peers' requests flushing): look again now and then rather than
		// spinning on a time already gone.
		if now := time.Now(); !r.grace.After(now) {
			return now.Add(10 * time.Millisecond)
		}
		return r.grace
	case !r.decideBy.IsZero():
		return r.decideBy
	}
	return r.deadline
}

// advance moves the post along; called under t.mu after every poll.
func (r *Request) advance(now time.Time) {
	t := r.t
	switch r.state {
	case sStalled:
		if !r.deadline.IsZero() && !now.Before(r.deadline) {
			r.fail(r.ctxError(fmt.Errorf("%w: stall", context.DeadlineExceeded)), nil)
		}
		return
	case sRunning:
		done, err := r.task.State()
		if err != nil {
			r.fail(err, nil)
			return
		}
		if !done {
			break
		}
		r.stageInFlight = false
		if err := r.stage.Complete(nil); err != nil {
			r.state = sAgree // the stage's post is over; fail from a state that has one
			r.fail(err, nil)
			return
		}
		r.state = sAgree
		fallthrough
	case sAgree:
		if !r.sentDone {
			for i := range r.children {
				if r.doneFrom[i] < r.post {
					goto deadline
				}
			}
			if r.parent < 0 {
				r.sendFin()
				r.finish(nil)
				return
			}
			r.sentDone = true
			_ = t.tl.SendCtl(r.parent, t.encode(ctlDone, 0, r.seq, r.post, uint32(t.rank), r.sig, ""))
		}
		if r.finFor >= r.post {
			r.sendFin()
			r.finish(nil)
			return
		}
	case sAborting:
		if r.quiesced() {
			r.finish(r.failErr)
			return
		}
		if !now.Before(r.grace) {
			var late []string
			for p := 0; p < t.size; p++ {
				if p != t.rank && r.acks[p] < r.post && !t.gone(p, r.seq) {
					late = append(late, fmt.Sprint(p))
					t.tl.Fence(p, fmt.Sprintf("rank %d did not acknowledge the abort of %s #%d within %v", p, r.typ, r.seq, t.cfg.AbortGrace))
				}
			}
			if len(late) > 0 {
				t.setBroken(fmt.Errorf("rank(s) %s did not acknowledge the abort of %s #%d within %v and were fenced off",
					strings.Join(late, ","), r.typ, r.seq, t.cfg.AbortGrace))
			}
			if r.task == nil || r.task.Quiesced() {
				r.finish(errors.Join(r.failErr, t.broken))
			}
		}
		return
	default:
		return
	}
deadline:
	if !r.deadline.IsZero() && !now.Before(r.deadline) {
		if r.lateDecision(now) {
			return
		}
		cause := r.ctxErr
		if cause == nil {
			cause = context.DeadlineExceeded
		}
		r.fail(r.ctxError(cause), nil)
	}
}

// lateDecision reports whether a deadline that passed after this rank said done must
// still wait for the decision. Having said done, this rank may already have succeeded
// everywhere else: failing it alone would give the ranks different outcomes. The
// decision (or an abort) comes within AbortGrace unless the peers are gone.
func (r *Request) lateDecision(now time.Time) bool {
	if r.state != sAgree || !r.sentDone {
		return false
	}
	if r.decideBy.IsZero() {
		r.decideBy = now.Add(r.t.cfg.AbortGrace)
	}
	return now.Before(r.decideBy)
}

func (r *Request) sendFin() {
	t := r.t
	for _, c := range r.children {
		_ = t.tl.SendCtl(c, t.encode(ctlFin, 0, r.seq, r.post, uint32(t.rank), r.sig, ""))
	}
}

// quiesced reports whether nothing of the failed post can still arrive or leave: the
// TL has nothing outstanding, and every peer acknowledged the abort or is down.
func (r *Request) quiesced() bool {
	if r.task != nil && !r.task.Quiesced() {
		return false
	}
	t := r.t
	for p := 0; p < t.size; p++ {
		if p != t.rank && r.acks[p] < r.post && !t.gone(p, r.seq) {
			return false
		}
	}
	return true
}

// onCtl handles a control message for this request.
func (r *Request) onCtl(peer int, kind, flags byte, post uint32, origin int, sig uint32, cause string) {
	t := r.t
	switch kind {
	case ctlDone:
		if sig != r.sig && r.pendingErr == nil {
			r.pendingErr = &PeerError{Rank: peer, Seq: r.seq, Post: post,
				Cause: fmt.Sprintf("rank %d initialized a different collective #%d than this rank's (%s): every rank must initialize the same collectives in the same order", peer, r.seq, r.desc)}
			if r.post == post {
				r.fail(r.pendingErr, nil)
			}
			return
		}
		for i, c := range r.children {
			if c == peer && post > r.doneFrom[i] {
				r.doneFrom[i] = post
			}
		}
	case ctlFin:
		if post > r.finFor {
			r.finFor = post
		}
	case ctlAbort:
		if post > r.acks[peer] {
			r.acks[peer] = post
		}
		pe := &PeerError{Rank: origin, Seq: r.seq, Post: post, Cause: cause, Broken: flags&flagBroken != 0}
		switch {
		case post < r.post:
			// This rank moved on: nothing more of that post will come
			// from here. Say so, or the sender fences it after its grace.
			if flags&flagAck == 0 {
				_ = t.tl.SendCtl(peer, t.encode(ctlAbort, flagAck, r.seq, post, uint32(origin), 0, cause))
			}
			return
		case post > r.post || r.state == sInit:
			if r.futureAbort == nil || post < r.futureAbort.Post {
				r.futureAbort = pe
			}
		case r.state == sDone:
			if flags&flagAck == 0 {
				_ = t.tl.SendCtl(peer, t.encode(ctlAbort, flagAck, r.seq, post, uint32(origin), 0, cause))
			}
			return
		default:
			r.fail(pe, pe)
			return
		}
		if post > r.flooded {
			r.flooded = post
			t.flood(r.seq, post, origin, cause, pe.Broken, 0)
		}
	}
}
