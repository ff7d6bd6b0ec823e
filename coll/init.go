package coll

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unsafe"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/internal/topo"
	"github.com/ibcoll/ibcoll/mem"
)

// Init initializes a collective on this rank. Every rank of the team must initialize
// the same collectives in the same order: the k-th Init is collective k on every rank.
// An Init that fails (on a broken team too) still takes its number and tells the
// other ranks that k failed, so that their posts of k end with an error instead of
// waiting.
func (t *Team) Init(a Args) (*Request, error) { return t.init("Init", a, nil, false) }

// InitInto is Init into q, a request of this team that this rank closed, or a zero
// Request (new(coll.Request)): it allocates no Request, so that a loop of
// non-persistent collectives of one shape through Init, Post, Wait and Close allocates
// nothing (Team.Run does this for its callers). q then holds the new collective, as
// Init's result would: whatever still refers to q refers to it, so q must be the
// caller's alone. Like Init, it takes the collective's number even when it fails: on
// a closed or broken team it fails with ErrClosed or the break (whatever q is); a q
// that is nil or of another team is refused with ErrInvalid, one still open (not
// closed, or its Close failed) with ErrBusy, and the other ranks fail that collective
// at once; such a q is left as it was. Any other failure (bad Args, a broken or
// closed team, an injected fault) leaves q a zero Request, unless releasing what it
// had built failed as well (it then stays open: ErrBusy).
func (t *Team) InitInto(q *Request, a Args) error {
	_, err := t.init("InitInto", a, q, true)
	return err
}

// init is Init, and InitInto (reuse) into into.
func (t *Team) init(op string, a Args, into *Request, reuse bool) (*Request, error) {
	if err := t.usable(op); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.settle() // what this call queued leaves even if no call follows
	if t.closed || t.broken != nil {
		if reuse && t.reusable(op, into) == nil {
			reuseRequest(into) // as after any failure of a q InitInto accepts
		}
	}
	if t.closed {
		return nil, fmt.Errorf("coll: %s: team: %w", op, ErrClosed)
	}
	if t.broken != nil {
		err := fmt.Errorf("coll: %s: %w", op, t.broken)
		t.refuseInit(a, err)
		return nil, err
	}
	if reuse {
		if err := t.reusable(op, into); err != nil {
			t.initRefused(a, err)
			return nil, err
		}
		reuseRequest(into)
	}
	k := t.nextSeq.Load()
	r, err := t.initLocked(k, a, into)
	if err != nil {
		if r != nil {
			rerr := r.release()
			switch {
			case rerr == nil && reuse:
				reuseRequest(into) // released: reusable, as InitInto's doc says
			case rerr != nil && reuse:
				// It stays the caller's, open: its Close retries, and Team.Close
				// refuses until then rather than free what it still holds.
				t.stuck = append(t.stuck, r)
			case rerr != nil && !reuse:
				// Init drops r, whose Close no caller can retry. Nothing was posted,
				// so no peer writes into the caller's buffers: let them go, or their
				// Close (and a DM buffer's context's) would fail for ever. What r
				// could not release waits for Team.Close, which tries again.
				r.releaseHeld()
				t.dropped = append(t.dropped, r)
			}
		}
		// No task, so no task peers: every rank hears it from here, which also
		// answers the aborts of those that exposed buffers to this rank (they need
		// not wait for a rank that may not call the library again).
		t.initRefused(a, err)
		return nil, err
	}
	t.reqs[k] = r
	t.live = append(t.live, r)
	t.sigRecord(k, r.sig, r.sigCause)
	t.nextSeq.Store(k + 1)
	if pe := t.leftBefore(k); pe != nil {
		r.abort.future = pe
	}
	if ps := t.takePending(k); ps != nil {
		// The replay floods what the stash flooded again, to the task's peers too.
		for _, m := range ps.msgs {
			handler{t}.Control(m.peer, m.msg)
		}
		t.recyclePending(ps)
	}
	r.sigc.ready = true
	r.sigStep()
	return r, nil
}

// reusable checks InitInto's q: a zero Request, or one of this team that Close
// released (Close marks it closed only then, and takes it out of the team's tables,
// so nothing of the team refers to it).
func (t *Team) reusable(op string, q *Request) error {
	switch {
	case q == nil:
		return invalid(op, "q is nil: pass a closed Request of this team, or new(coll.Request)")
	case q.t == nil:
		return nil
	case q.t != t:
		return invalid(op, "q is a request of another team")
	case !q.closed:
		return fmt.Errorf("coll: %s: q holds %s #%d, still open: Close it first: %w", op, q.typ, q.seq, ErrBusy)
	}
	return nil
}

// refuseInit is an Init refused because the team broke here: it still takes its
// number and floods that it failed, over the overlay (every rank relays it once), as a
// failed post does. A peer the break has not reached yet runs collective k; if it
// reported done, it takes no failure but the decision or an abort, and the decision
// passes through this rank, which has no request to give one (the soak saw a barrier
// after a break wait out its deadline and the Timeout after it on such a rank). The
// agreement's children hear it directly (initFailed): a rooted collective's
// agreement tree is not the overlay, and the overlay's relays may have told of k
// already, on links that did not reach them (the hour soak's gather rooted at rank 2,
// n=8: its child 3 waited 60 s).
func (t *Team) refuseInit(a Args, err error) {
	t.initFailed(a, false, fmt.Sprintf("init of %s on a broken team: %v", a.Type, err), flagBroken)
}

// initFailed is an Init of a that failed (or was refused) here: it takes the
// collective's number k and tells the peers that post 1 of k failed on this rank, to
// every rank if every, else over the overlay, unless a stashed abort of k already
// flooded the news of k from here (over the overlay). Where k would run the
// completion agreement, the children of this rank in its tree that the overlay does
// not reach hear it too, as refusedBroken tells them of a refused post: a child that
// posted and reported done waits for a decision that passes only through this rank,
// and takes no other failure. The tree is the one the request would have built from
// a's root; a root outside the team (an Init that failed for it) gives none.
func (t *Team) initFailed(a Args, every bool, cause string, flags ctlFlags) {
	k := t.nextSeq.Load()
	t.nextSeq.Store(k + 1)
	ps := t.takePending(k)
	flooded := ps != nil && ps.flooded >= 1
	t.recyclePending(ps)
	if !flooded {
		if every || flags&flagMismatch != 0 {
			t.floodEvery(k, 1, t.rank, cause, flags) // every child included
			return
		}
		t.flood(k, 1, t.rank, cause, flags)
	}
	if !t.cfg.AllOrNothing && a.Type != Barrier {
		return
	}
	root := 0
	if a.Type.IsRooted() {
		root = a.Root
	}
	if root < 0 || root >= t.size {
		return
	}
	_, children := topo.KNomialPeers(t.size, root, t.rank, agreeRadix)
	t.tellUnreached(children, ctlMsg{kind: ctlAbort, flags: flags & (flagBroken | flagMismatch), seq: k, post: 1, origin: uint32(t.rank), cause: cause})
}

// initRefused is Init's refusal of a with err, told to every rank (initFailed).
func (t *Team) initRefused(a Args, err error) {
	t.initFailed(a, true, fmt.Sprintf("init of %s failed: %v", a.Type, err), failFlags(err))
}

// initLocked builds request k, in into where that is not nil. On error it may return a
// partial request to release.
func (t *Team) initLocked(k uint64, a Args, into *Request) (*Request, error) {
	if err := t.fs.Hit(fault.Init); err != nil {
		return nil, fmt.Errorf("coll: Init: %w", err)
	}
	l, err := t.layout(a)
	if err != nil {
		return nil, err
	}
	if !a.Type.IsReduction() {
		// Ignored there (Args' doc): a generic caller that fills Op for every
		// collective, as ibcoll-perf does, must agree with one that leaves it zero.
		a.Op = 0
	}
	r := into
	if r == nil {
		r = t.spare // Run's request, closed and handed back by the last Run (t.recycle)
		t.spare = nil
	}
	if r == nil {
		r = new(Request)
	}
	r.t, r.seq, r.typ, r.persistent = t, k, a.Type, a.Flags&Persistent != 0
	r.unused = [2]bool{!l.Src.Used(), !l.Dst.Used()}
	root := 0
	r.root = noRoot
	if a.Type.IsRooted() {
		root, r.root = a.Root, a.Root
	}
	r.agreed = t.cfg.AllOrNothing || a.Type == Barrier
	if r.agreed {
		parent, children := t.agreeTree(root)
		r.agree = newAgreement(parent, children, r.agree.doneFrom)
	}

	dt := max(a.DType.Size(), 1)
	src, err := r.userBuf("Src", a.Src, l.Src.Bytes(dt))
	if err != nil {
		return r, err
	}
	dst, err := r.userBuf("Dst", a.Dst, l.Dst.Bytes(dt))
	if err != nil {
		return r, err
	}
	if overlaps(src, dst) && usedBytesMeet(src, l.Src, dst, l.Dst, dt) {
		return r, invalid("Init", "Args.Src (%d bytes at %#x) and Args.Dst (%d bytes at %#x) overlap: a collective in place sets InPlace and passes the one buffer its type documents",
			src.Len, src.Addr, dst.Len, dst.Addr)
	}
	aa := asym.Args{Coll: a.Type, Root: a.Root, Rank: t.rank, Size: t.size, DtypeSize: dt, InPlace: l.InPlace,
		Src: asymBuf(l.Src, src.Type), Dst: asymBuf(l.Dst, dst.Type)}
	if r.kit == nil {
		r.kit = t.takeKit()
	}
	kit := r.kit
	if err := asym.PlanInto(&kit.plan, aa, t.reach); err != nil {
		return r, fmt.Errorf("coll: Init: %w", err)
	}
	plan := &kit.plan
	opts := t.stageOpts
	if pipelineMin != 0 { // tests only
		opts = append(opts[:len(opts):len(opts)], asym.WithPipelineMin(pipelineMin))
	}
	err = kit.stage.Init(*plan, src, dst, scratchRegistrar{t}, opts...)
	// A failed Init may keep scratch it could not release: the request's release
	// closes the stage, which tries again, and only then gives the kit back.
	r.stage = &kit.stage
	if err != nil {
		return r, fmt.Errorf("coll: Init: staging: %w", err)
	}
	if a.Type == Gather || a.Type == Allgather || a.Type == Alltoall {
		// One block per rank, side by side, each landing from its start on.
		r.stage.SetRows(l.Block*dt, t.size)
	}
	// The spec lives in the request, one allocation less; the transport copies it.
	spec := &r.spec
	*spec = driver.TaskSpec{Seq: k, Type: a.Type, Root: root, DType: a.DType, Op: a.Op,
		InPlace: l.InPlace, Persistent: r.persistent, Block: l.Block, Alg: a.Alg}
	if spec.Alg == "" {
		spec.Alg = t.cfg.Algs[a.Type]
	}
	spec.Src = driverBuf(a.Src, r.stage.Src(), plan.Src.Needed, l.Src, dt)
	spec.Dst = driverBuf(a.Dst, r.stage.Dst(), plan.Dst.Needed, l.Dst, dt)
	if (plan.Dst.Needed && plan.Dst.CopyOut) || (plan.Src.Needed && plan.Src.CopyOut) {
		spec.Landed = kit.landed // Src is the output in bcast
	}
	if plan.Src.Needed && plan.Src.CopyIn {
		spec.Ready = kit.ready
	}
	spec.Sig = t.preSig(a, r.root, l)
	if !r.agreed {
		spec.Witness = (*sigWitness)(r)
	}
	r.task, err = t.tl.NewTask(spec)
	if err != nil {
		return r, fmt.Errorf("coll: Init: %s: %w", a.Type, err)
	}
	if o, ok := r.task.(driver.OutputOwner); ok && r.persistent && spec.Landed != nil {
		r.outputs = o
	}
	r.alg = r.task.Alg()
	r.sigCause = t.sigCauseFor(a, r.root, l, r.alg)
	r.desc = r.sigCause[4:]
	r.sig = fnv32a(r.desc)
	// The signature covers every size the transport checks only where the block is
	// agreed: a v-collective's counts are each rank's own (sigCheck.early). Agreed
	// requests (AllOrNothing, barriers) end by the agreement: there the check only
	// detects, and may assume for v-collectives too.
	r.sigc.early = l.Block >= 0 || r.agreed
	return r, nil
}

// sigKey is what a signature describes: a collective of the same key on every rank
// has the same signature text.
type sigKey struct {
	typ   CollType
	root  int
	dt    DType
	op    Op
	block int
	used  bool // a barrier uses no buffer, and agrees on no count
	alg   string
}

// sigCauseFor is the signature text of a collective: the 4 bytes of the signature
// message's root (sigPayload), then what "%v%s %v%s count %s alg %s" gives (opText), so that
// the message a post sends is a substring, not a new string. The team keeps the
// last one: a repeated shape reuses it instead of allocating
// (BenchmarkRepeatedInitAllocs), and a peer's matching message is read into it
// (handler.Control).
func (t *Team) sigCauseFor(a Args, root int, l collective.Layout, alg string) string {
	key := sigKey{typ: a.Type, root: root, dt: a.DType, op: a.Op, block: l.Block, used: l.Src.Used() || l.Dst.Used(), alg: alg}
	if t.lastSig.cause != "" && t.lastSig.key == key {
		return t.lastSig.cause
	}
	rootWord, rootNum := "", ""
	if a.Type.IsRooted() {
		rootWord, rootNum = " root ", strconv.Itoa(a.Root)
	}
	var rb [4]byte
	binary.LittleEndian.PutUint32(rb[:], uint32(root))
	cause := string(rb[:]) + a.Type.String() + rootWord + rootNum + " " + a.DType.String() + opText(a.Op) + " count " + l.Agreed() + " alg " + alg
	t.lastSig.key, t.lastSig.cause = key, cause
	return cause
}

// preSig is the signature of the collective without its algorithm, which the
// transport chooses in NewTask (driver.TaskSpec.Sig): the transport mixes its
// algorithm in. The team keeps the last one, as sigCauseFor does.
func (t *Team) preSig(a Args, root int, l collective.Layout) uint32 {
	key := sigKey{typ: a.Type, root: root, dt: a.DType, op: a.Op, block: l.Block, used: l.Src.Used() || l.Dst.Used()}
	if t.lastPre.set && t.lastPre.key == key {
		return t.lastPre.sig
	}
	rootWord, rootNum := "", ""
	if a.Type.IsRooted() {
		rootWord, rootNum = " root ", strconv.Itoa(a.Root)
	}
	sig := fnv32a(a.Type.String() + rootWord + rootNum + " " + a.DType.String() + opText(a.Op) + " count " + l.Agreed())
	t.lastPre.key, t.lastPre.sig, t.lastPre.set = key, sig, true
	return sig
}

// opText is a reduction's operator in a signature ("/sum"), and nothing for the
// collectives that do not reduce, whose Op Init zeroes.
func opText(o Op) string {
	if o == 0 {
		return ""
	}
	return "/" + o.String()
}

// fnv32a is FNV-1a over s, as hash/fnv's New32a computes it.
func fnv32a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// layout checks a against the collective's row of the table and returns what the
// collective uses on this rank.
func (t *Team) layout(a Args) (collective.Layout, error) {
	const op = "Init"
	if !a.Type.Valid() {
		return collective.Layout{}, invalid(op, "Args.Type is not a valid collective (%d)", uint8(a.Type))
	}
	if a.Flags&^(InPlace|Persistent) != 0 {
		return collective.Layout{}, invalid(op, "Args.Flags has unknown bits %#x", uint8(a.Flags&^(InPlace|Persistent)))
	}
	if a.Type.IsRooted() && (a.Root < 0 || a.Root >= t.size) {
		return collective.Layout{}, invalid(op, "Args.Root is %d, want [0, %d)", a.Root, t.size)
	}
	if a.Type != Barrier && !a.DType.Valid() {
		return collective.Layout{}, invalid(op, "Args.DType is not a valid datatype (%d)", uint8(a.DType))
	}
	if a.Type.IsReduction() {
		if err := collective.CheckOp(a.Op, a.DType); err != nil {
			return collective.Layout{}, wrapArg(op, err)
		}
	}
	if a.Type == Bcast && !a.Dst.empty() {
		// MPI's and NCCL's habit of a receive buffer; here it would be ignored, and
		// an empty Src on a non-root would surface as a count mismatch elsewhere.
		return collective.Layout{}, invalid(op, "Args.Dst is set, but bcast has one buffer on every rank, Args.Src (the root's data, the other ranks' result): leave Args.Dst empty")
	}
	l, err := a.Type.Layout(collective.Args{Rank: t.rank, Size: t.size, Root: a.Root, InPlace: a.Flags&InPlace != 0,
		DTypeSize: a.DType.Size(),
		Src:       collective.Buf{Count: a.Src.Count, Counts: a.Src.Counts, Displs: a.Src.Displs},
		Dst:       collective.Buf{Count: a.Dst.Count, Counts: a.Dst.Counts, Displs: a.Dst.Displs}})
	return l, wrapArg(op, err)
}

// asymBuf describes a used buffer to asym; an unused one is host memory with nothing
// in it.
func asymBuf(b collective.BufLayout, t mem.Type) asym.Buf {
	if !b.Used() {
		return asym.Buf{Type: mem.Host}
	}
	return asym.Buf{Type: t, Count: b.Count, Counts: b.Counts, Displs: b.Displs}
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
		// Held until the request's Close: closing the buffer before then fails
		// (ErrBusy) instead of freeing memory that writes may still land in.
		if err := d.Buf.Acquire(); err != nil {
			return asym.UserBuf{}, invalid(op, "Args.%s.Buf is closed", name)
		}
		side := 0
		if name == "Dst" {
			side = 1
		}
		r.held[side] = d.Buf
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

// overlaps reports whether two user buffers of one rank share bytes: the transport
// reads one while it writes the other, in an order no rank controls. A DM buffer's
// address is its offset in its pool, not an address of the process: two DM buffers
// overlap only as one buffer, since a pool's chunks share no bytes. Where one is a
// v-layout, usedBytesMeet then looks at the blocks themselves.
func overlaps(a, b asym.UserBuf) bool {
	if a.Len == 0 || b.Len == 0 {
		return false
	}
	if a.Type == mem.DM || b.Type == mem.DM {
		return a.Type == b.Type && a.Buf != nil && a.Buf == b.Buf
	}
	return a.Addr < b.Addr+uintptr(b.Len) && b.Addr < a.Addr+uintptr(a.Len)
}

// usedBytesMeet reports whether the bytes a collective touches in two buffers that
// overlap (overlaps) meet. A plain buffer is touched whole; a v-layout only in its
// non-empty blocks, whose gaps may hold the other buffer. It walks the blocks only for
// buffers that overlap, which correct arguments rarely do.
func usedBytesMeet(a asym.UserBuf, la collective.BufLayout, b asym.UserBuf, lb collective.BufLayout, dt int) bool {
	if la.Counts == nil && lb.Counts == nil {
		return true
	}
	sa, sb := usedSpans(a.Addr, la, dt), usedSpans(b.Addr, lb, dt)
	for i, j := 0, 0; i < len(sa) && j < len(sb); {
		if sa[i][0] < sb[j][1] && sb[j][0] < sa[i][1] {
			return true
		}
		if sa[i][1] <= sb[j][1] {
			i++
		} else {
			j++
		}
	}
	return false
}

// usedSpans lists the byte ranges [start, end) of a buffer at addr that the collective
// touches, sorted by start and merged where they touch or overlap.
func usedSpans(addr uintptr, l collective.BufLayout, dt int) [][2]uintptr {
	if l.Counts == nil {
		return [][2]uintptr{{addr, addr + uintptr(l.Bytes(dt))}}
	}
	spans := make([][2]uintptr, 0, len(l.Counts))
	for i, c := range l.Counts {
		if c > 0 {
			start := addr + uintptr(l.Displs[i]*dt)
			spans = append(spans, [2]uintptr{start, start + uintptr(c*dt)})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	merged := spans[:0]
	for _, s := range spans {
		if n := len(merged); n > 0 && s[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], s[1])
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// driverBuf describes the buffer the transport must use: the scratch when staged, else
// the user's.
func driverBuf(d BufferDesc, eff asym.UserBuf, staged bool, l collective.BufLayout, dt int) driver.Buf {
	bytes := l.Bytes(dt)
	b := driver.Buf{Type: eff.Type, Bytes: bytes, Count: l.Count, Counts: l.Counts, Displs: l.Displs}
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

// scratchRegistrar registers staging scratch through the team's cache, which keeps a
// buffer's registration as long as the buffer (scratchCache.register).
type scratchRegistrar struct{ t *Team }

func (r scratchRegistrar) Register(b *mem.Buffer) (io.Closer, error) {
	return r.t.scratch.register(r.t.tl, b)
}
