package tlmlx5

import (
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/hostcopy"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/reduce"
	"github.com/ibcoll/ibcoll/verbs"
)

// A task is one collective of one rank: a graph of operations built once at Init and
// run at every post. Sends and receives pair up across ranks by tag: the receiver
// tells the sender where to write (a ready-to-receive carrying the address, rkey and
// length of its buffer for that tag), the sender writes straight into it with RDMA
// WRITE WITH IMMEDIATE (sequence number and tag in the immediate), and the receiver's
// receive completion says the data is there. An operation starts when the operations
// it depends on are done; a receive into a buffer still being read waits for that
// read, so a ready-to-receive never exposes memory in use.

type opKind uint8

const (
	opSend opKind = iota + 1
	opRecv
	opCopy
	opReduce
	opFinal
)

type opState uint8

const (
	opIdle opState = iota
	opWaitRTR
	opPosted
	opDone
	opWaitSrc // its source range is still being copied in (srcwait.go)
	opCopying // a local copy in pieces, between two of them (pieces.go)
)

// lbuf is a local registered buffer: host memory the CPU reaches (host), or a chunk
// of the context's device-memory pool (dm), which only the NIC and the pool's copies
// reach.
type lbuf struct {
	addr uintptr // in mr's address space (an offset in a zero-based DM MR)
	n    int
	typ  mem.Type
	mr   *verbs.MR // whose keys the work requests use: reg's, or the pool's
	reg  *regEntry // nil for DM: the pool's MR covers it
	host []byte    // a CPU view; for a type the CPU cannot reach, never touched
	dm   *dm.Chunk
	own  *mem.Buffer // TL scratch, freed with the task
	// kept: own went to the team's quarantine at Close, a peer may still write into it
	// (quarantine.go)
	kept bool
	// stream: host memory pinned for the CUDA copy engine (staging scratch), which
	// reads it next by DMA; local copies into it use non-temporal stores, as soft0's
	// writes into it do, since the engine read lines left dirty in a CPU cache at half
	// speed on an H200 (docs/design.md, "Dirty lines cost the copy engine twice").
	stream bool
	// alt: the second buffer of scratch that receives re-armed ahead use (ahead.go),
	// swapped in at every other post; side is the post parity this lbuf holds.
	alt  *lbuf
	side uint32
	// eagerIn: an eager receive of the task copies into this DM chunk by the CPU
	// (viaNIC: its partial words then stay the CPU's, serialized, as all its copies)
	eagerIn bool
}

// seg is a byte range of a local buffer.
type seg struct {
	b      *lbuf
	off, n int
}

// cpu: the transport's own scratch is host memory (type zero).
func cpu(t mem.Type) bool { return t == mem.Host || t == mem.CUDAManaged }

func (s seg) bytes() []byte {
	if s.n == 0 {
		return nil
	}
	return s.b.host[s.off : s.off+s.n]
}

// copySeg is the transport's local copy of src into dst (as long): memcpy where the CPU
// reaches both sides, the CUDA copy engine (through mem) for device memory, a DM
// chunk's own copies for NIC device memory, which the CPU cannot address, and the
// task's bounce buffer where neither side is CPU memory and one is DM (made at the
// first such copy; the ranges of one collective's copies never overlap).
func (k *task) copySeg(dst, src seg) error {
	if dst.n == 0 {
		return nil
	}
	switch {
	case dst.b.dm == nil && src.b.dm == nil:
		if cpu(dst.b.typ) && cpu(src.b.typ) {
			if dst.b.stream {
				hostcopy.Stream(dst.bytes(), src.bytes())
			} else {
				hostcopy.Copy(dst.bytes(), src.bytes())
			}
			return nil
		}
		return mem.CopyPtr(dst.b.addr+uintptr(dst.off), dst.b.typ, src.b.addr+uintptr(src.off), src.b.typ, dst.n)
	case src.b.dm == nil && cpu(src.b.typ):
		return dst.b.dm.CopyTo(dst.off, src.bytes())
	case dst.b.dm == nil && cpu(dst.b.typ):
		return src.b.dm.CopyFrom(dst.bytes(), src.off)
	}
	if k.bounce == nil {
		k.bounce = make([]byte, 64<<10)
	}
	for done := 0; done < src.n; {
		m := min(src.n-done, len(k.bounce))
		if err := src.read(k.bounce[:m], done); err != nil {
			return err
		}
		if err := dst.write(done, k.bounce[:m]); err != nil {
			return err
		}
		done += m
	}
	return nil
}

// read copies the segment's bytes from off on into p.
func (s seg) read(p []byte, off int) error {
	switch {
	case s.b.dm != nil:
		return s.b.dm.CopyFrom(p, s.off+off)
	case cpu(s.b.typ):
		copy(p, s.b.host[s.off+off:])
		return nil
	}
	// p's address as an integer keeps nothing alive: the caller may hold p no longer.
	err := mem.CopyPtr(uintptr(unsafe.Pointer(unsafe.SliceData(p))), mem.Host, s.b.addr+uintptr(s.off+off), s.b.typ, len(p))
	runtime.KeepAlive(p)
	return err
}

// write copies p into the segment from off on.
func (s seg) write(off int, p []byte) error {
	switch {
	case s.b.dm != nil:
		return s.b.dm.CopyTo(s.off+off, p)
	case cpu(s.b.typ):
		copy(s.b.host[s.off+off:], p)
		return nil
	}
	err := mem.CopyPtr(s.b.addr+uintptr(s.off+off), s.b.typ, uintptr(unsafe.Pointer(unsafe.SliceData(p))), mem.Host, len(p))
	runtime.KeepAlive(p)
	return err
}

type region struct {
	addr uint64
	rkey uint32
}

type op struct {
	kind  opKind
	peer  int
	tag   int
	n     int
	segs  []seg // send: the data, in order
	dst   region
	out   seg   // recv target; copy/reduce/final output
	a     seg   // copy source
	ins   []seg // reduce inputs, folded left; out may be ins[0]
	inb   [][]byte
	ndeps int32
	next  []int32
	idx   int32
	offs  []uint64 // send: offset of each work request in the data
	part  []bool   // send: the work request ends a landing piece (partial immediate)

	// Per post.
	left    int32
	state   opState
	wrs     []verbs.SendWR
	wrsLeft int
	landed  int // recv: bytes that partial writes reported in place; copy: bytes copied in pieces
	reduced int // reduce: bytes of out already reduced while an input was landing
	early   int // send: its work requests [0, early) are queued (forwardReduced)
	rtr     rtr
	haveRTR uint32 // the post whose ready-to-receive is in rtr
	// nextRTR: ready-to-receives of posts not started yet, by post parity (a receiver
	// that arms ahead sends p+2's while this rank may still wait for p's completion).
	nextRTR [2]rtr
	haveNxt [2]uint32
	// armsAhead: a receive with two buffers that sends the next post's ready-to-receive
	// when a post starts (ahead.go); ahead is the post it last did so for, and aheadIn
	// says that post's data has landed.
	armsAhead bool
	ahead     uint32
	aheadIn   bool
	// aheadPieces: landing pieces of that post's data that came before it started (a
	// staged output's receive, which arms ahead with pieces: ahead.go)
	aheadPieces int32

	// The eager path (eager.go): eager says the message takes it (at most eagerMax
	// bytes); rts, that this post's goes the rendezvous way instead (the sender had
	// no credit). ewrs are an eager send's writes into a ring slot, at offsets eoffs.
	eager bool
	rts   bool
	told  uint32 // the post whose size a rendezvous send told (tellSize)
	ewrs  []verbs.SendWR
	eoffs []uint64
	// eimm is the SGE list of the write that ends an eager send in one work request:
	// the header (filled in at flush) and then the first write's segments; nil where
	// they do not fit in maxSGE, and the header goes as a control message instead.
	eimm []verbs.SGE
}

type task struct {
	t           *team
	id          uint32
	seq         uint64
	spec        driver.TaskSpec
	alg         string
	sig         uint32
	ops         []op
	recvByTag   []int32
	sendByTag   []int32
	bufs        []*lbuf
	post        uint32
	done        int
	err         error
	aborted     bool
	started     bool
	outstanding int
	work        []int32
	later       []int32          // local copies and folds, started once the work list's messages are out (run)
	dst         *lbuf            // the user's (or staging's) destination
	out         *lbuf            // what this rank's result is written to: dst (src in bcast)
	landed      func(off, n int) // spec.Landed, nil for reductions
	src         *lbuf
	ready       func(off, n int) (bool, error) // spec.Ready
	waitSrc     []int32                        // ops waiting for their source (srcwait.go)
	srcSpare    []int32
	bounce      []byte  // local copies that the CPU cannot make directly
	streamed    int     // bytes reduced while their receive was still landing, over all posts (stream.go)
	pieces      int     // landing pieces received before their send's end, over all posts
	copyPieces  int     // pieces of local copies made in pieces (pieces.go), over all posts
	forwarded   int     // bytes sent before the reduction that made them ended, over all posts (stream.go)
	srcAhead    int     // bytes sent while later bytes of the same send were still being copied in, over all posts (srcwait.go)
	copyWaited  int     // times a local copy in pieces, having copied some, found its next piece's source not in place (pieces.go)
	overlapped  int     // local copies and folds started after posting messages that waited for them (run), over all posts
	doubled     []*lbuf // scratch with a second buffer, flipped at every Post (ahead.go)
	armedAhead  int     // ready-to-receives sent ahead, at the end of a post (ahead.go), over all posts
	tookAhead   int     // receives whose post found their ready-to-receive sent ahead, over all posts
	landedAhead int     // of those, the ones whose data had landed before their post started
	piecesAhead int     // landing pieces that came before their post started, over all posts
	// outDoubled: the staged output (out) has two buffers of the transport's own,
	// post p's the one of parity p (ahead.go, doubleOutput; Output)
	outDoubled bool
	// stray is a ready-to-receive for a tag this task does not send, which came
	// before the post it names: evidence of a mismatch, kept until that post.
	stray    rtr
	strayWhy string // what the evidence shows, when it is no ready-to-receive (eager.go)
	hasStray bool
	// cacheKey: the task may be kept for reuse when it closes (taskcache.go); ownV:
	// its spec's counts and displacements are its own copies.
	cacheKey, ownV bool
	peerList       []int // Peers, once computed
	// gdrFlush: out is GPU memory that the NIC writes directly (GPUDirect), whose
	// writes are flushed once a post is done, before State says so (gpudirect.go);
	// flushed: this post's flush was made.
	gdrFlush, flushed bool
}

func (t *team) NewTask(spec *driver.TaskSpec) (_ driver.Task, err error) {
	if old := t.bySeq[seqKey(spec.Seq)]; old != nil {
		return nil, fmt.Errorf("tlmlx5: collective #%d is still open and shares the wire routing of #%d (the immediate carries %d bits of the sequence number); close requests before %d more are initialized: %w",
			old.seq, spec.Seq, seqBits, SeqWindow, driver.ErrBusy)
	}
	if k, err := t.reuse(spec); err != nil || k != nil {
		if err != nil {
			return nil, err
		}
		t.open(k)
		return k, nil
	}
	k := &task{t: t, seq: spec.Seq, spec: *spec, cacheKey: cacheable(spec)}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.drop(k))
		}
	}()
	b := &builder{k: k, t: t, spec: &k.spec, n: t.size, me: t.rank, root: spec.Root, dt: max(spec.DType.Size(), 1)}
	// Src is only read, except that a bcast delivers into it off the root.
	srcReceives := spec.Type == collective.Bcast && spec.Root != t.rank
	if b.src, err = b.user("Src", spec.Src, srcReceives); err != nil {
		return nil, err
	}
	if b.dst, err = b.user("Dst", spec.Dst, true); err != nil {
		return nil, err
	}
	k.dst, k.src, k.ready, k.out = b.dst, b.src, spec.Ready, b.dst
	if spec.Type == collective.Bcast {
		k.out = b.src // every rank's data is Src; a non-root receives into it
	}
	if !spec.Type.IsReduction() {
		k.landed = spec.Landed
	}
	if err := b.build(); err != nil {
		return nil, err
	}
	b.addSrcIn()
	k.gdrFlush = gpuDirectOut(k.out)
	h := fnv.New32a()
	// coll's signature (spec.Sig) goes in too: an equal signature on a peer's message
	// then shows that the peer initialized the collective as this rank did (Tells).
	fmt.Fprintf(h, "%v/%d/%v/%v/%s/%x", spec.Type, spec.Root, spec.DType, spec.Op, k.alg, spec.Sig)
	k.sig = h.Sum32()
	if err := k.prepare(); err != nil {
		return nil, err
	}
	t.open(k)
	return k, nil
}

// open routes the wire to task k, and gives it what came for it before.
func (t *team) open(k *task) {
	t.nextID = (t.nextID + 1) & maxTaskID
	k.id = t.nextID
	t.tasks[k.seq] = k
	t.bySeq[seqKey(k.seq)] = k
	t.byID[k.id] = k
	for s, l := range t.stash {
		if s < k.seq {
			t.unstash(s, l)
		}
	}
	if l, ok := t.stash[k.seq]; ok {
		for _, m := range l {
			k.onRTR(m)
		}
		t.unstash(k.seq, l)
	}
	k.adoptEarly()
}

// prepare builds the tag tables and the work requests of every send.
func (k *task) prepare() error {
	top := -1
	for i := range k.ops {
		if o := &k.ops[i]; o.kind == opSend || o.kind == opRecv {
			top = max(top, o.tag)
		}
	}
	if top >= eagerImmTag {
		return fmt.Errorf("tlmlx5: %v needs %d tags, the immediate carries %d: %w", k.spec.Type, top+1, eagerImmTag, driver.ErrNotSupported)
	}
	k.recvByTag = make([]int32, top+1)
	k.sendByTag = make([]int32, top+1)
	for i := range k.recvByTag {
		k.recvByTag[i], k.sendByTag[i] = -1, -1
	}
	for i := range k.ops {
		o := &k.ops[i]
		if o.kind == opSend || o.kind == opRecv {
			o.eager = k.t.eager(o.n)
		}
		if o.kind == opRecv && o.eager && o.out.b != nil && o.out.b.dm != nil {
			o.out.b.eagerIn = true
		}
		switch o.kind {
		case opRecv:
			if k.recvByTag[o.tag] >= 0 {
				return fmt.Errorf("tlmlx5: %s: two receives with tag %d", k.alg, o.tag)
			}
			k.recvByTag[o.tag] = int32(i)
			if o.out.n > 0 {
				o.dst = region{addr: uint64(o.out.b.addr) + uint64(o.out.off), rkey: o.out.b.mr.RKey()}
			}
		case opSend:
			if k.sendByTag[o.tag] >= 0 {
				return fmt.Errorf("tlmlx5: %s: two sends with tag %d", k.alg, o.tag)
			}
			k.sendByTag[o.tag] = int32(i)
			k.buildWRs(i)
			if o.eager {
				k.buildEagerWRs(i)
			}
		}
		for _, d := range o.next {
			k.ops[d].ndeps++
		}
	}
	k.work = make([]int32, 0, len(k.ops))
	k.later = make([]int32, 0, len(k.ops))
	return k.doubleBuffers() // once every ndeps is counted
}

// buildWRs splits a send's segments into work requests of at most maxSGE SGEs and
// maxWRBytes bytes; only the remote address is filled in at post time. The last one
// carries the immediate, so the receiver learns of the data after all of it landed.
func (k *task) buildWRs(i int) {
	o := &k.ops[i]
	if o.n == 0 {
		o.wrs = []verbs.SendWR{{Op: verbs.OpSendWithImm, Signaled: true}}
		o.offs = []uint64{0}
		o.part = []bool{false}
		return
	}
	piece := pieceOf(o.n)
	pieces := o.n >= 2*piece
	var cur verbs.SendWR
	start, off := 0, 0
	emit := func() {
		cur.Op, cur.Signaled = verbs.OpRDMAWrite, true
		o.wrs = append(o.wrs, cur)
		o.offs = append(o.offs, uint64(start))
		o.part = append(o.part, false)
		cur = verbs.SendWR{}
		start = off
	}
	for _, s := range o.segs {
		for p := 0; p < s.n; {
			if len(cur.SGE) == maxSGE || (len(cur.SGE) > 0 && off-start == maxWRBytes) {
				emit()
			}
			m := min(s.n-p, maxWRBytes-(off-start))
			if pieces {
				m = min(m, piece-off%piece)
			}
			cur.SGE = append(cur.SGE, verbs.SGE{Addr: uint64(s.b.addr) + uint64(s.off+p), Length: uint32(m), LKey: s.b.mr.LKey()})
			p += m
			off += m
			if pieces && off%piece == 0 && off < o.n {
				emit()
				o.wrs[len(o.wrs)-1].Op = verbs.OpRDMAWriteWithImm
				o.part[len(o.part)-1] = true
			}
		}
	}
	emit()
	o.wrs[len(o.wrs)-1].Op = verbs.OpRDMAWriteWithImm
}

func (k *task) Alg() string { return k.alg }

func (k *task) Post(post uint32) error {
	if k.outstanding > 0 {
		return fmt.Errorf("tlmlx5: %v #%d: %d work requests of the last post still outstanding: %w", k.spec.Type, k.seq, k.outstanding, driver.ErrBusy)
	}
	k.post = post
	k.done, k.err, k.aborted, k.started, k.flushed = 0, nil, false, true, false
	k.waitSrc = k.waitSrc[:0]
	for i := range k.ops {
		o := &k.ops[i]
		o.left, o.state, o.landed, o.reduced, o.rts, o.early = o.ndeps, opIdle, 0, 0, false, 0
		if o.kind == opSend {
			for j := range o.wrs {
				o.wrs[j].ID = uint64(dataID(k.id, i))
				o.wrs[j].Imm = makeImm(k.seq, post, o.tag, o.part[j])
			}
			for j := range o.ewrs {
				o.ewrs[j].ID = uint64(dataID(k.id, i))
			}
		}
		if o.haveNxt[post%2] == post {
			o.rtr, o.haveRTR = o.nextRTR[post%2], post
		}
	}
	for _, b := range k.doubled {
		b.flip(post)
	}
	k.work, k.later = k.work[:0], k.later[:0]
	if len(k.t.early) > 0 {
		k.dropEarly(post)
	}
	if k.hasStray && k.stray.post <= post {
		k.hasStray = false
		if k.stray.post == post {
			if k.strayWhy != "" {
				k.mismatch(k.stray, k.strayWhy)
			} else {
				k.strayRTR(k.stray)
			}
			return nil
		}
	}
	for i := range k.ops {
		if k.ops[i].ndeps == 0 {
			k.work = append(k.work, int32(i))
		}
	}
	k.run()
	k.t.flushQueued()
	k.t.notePieces()
	return nil
}

// run starts the operations on the work list, and those they release. A local copy
// or fold of at least deferLocal bytes waits until the list holds no message to
// start, and the messages queued so far are posted before it: a root's ready-to-
// receives go out before its copy of its own block, so that its children write
// while it copies, instead of after.
func (k *task) run() {
	for !k.aborted {
		if len(k.work) == 0 {
			if len(k.later) == 0 {
				return
			}
			if k.t.flushQueued() {
				k.overlapped++
			}
			i := k.later[len(k.later)-1]
			k.later = k.later[:len(k.later)-1]
			k.start(&k.ops[i])
			continue
		}
		i := k.work[len(k.work)-1]
		k.work = k.work[:len(k.work)-1]
		if o := &k.ops[i]; o.kind != opRecv && o.kind != opSend && o.out.n >= deferLocal {
			k.later = append(k.later, i)
			continue
		}
		k.start(&k.ops[i])
	}
}

func (k *task) start(o *op) {
	switch o.kind {
	case opRecv:
		o.state = opPosted
		if o.eager {
			k.eagerRecv(o)
			return
		}
		if o.armsAhead {
			k.startAhead(o)
			return
		}
		k.t.sendRTR(k, o)
	case opSend:
		o.state = opWaitRTR
		k.t.link(o.peer) // a lazy link starts now, while the ready-to-receive is awaited
		if o.eager {
			k.issueEager(o)
		} else if o.haveRTR == k.post {
			k.issue(o)
		} else {
			k.tellSize(o)
		}
	case opCopy:
		if k.inPieces(o) {
			k.copyInPieces(o)
			return
		}
		if !k.srcReady(o) {
			return
		}
		if k.viaNIC(o) {
			k.copyViaNIC(o)
			return
		}
		if err := k.copySeg(o.out, o.a); err != nil {
			k.fail(fmt.Errorf("tlmlx5: %v #%d: local copy: %w", k.spec.Type, k.seq, err))
			return
		}
		k.opDoneLocal(o)
	case opReduce:
		if !k.srcReady(o) {
			return
		}
		if err := k.reduceRange(o, o.reduced, o.out.n); err != nil {
			k.fail(err)
			return
		}
		k.opDoneLocal(o)
	case opFinal:
		if err := reduce.Finalize(o.out.bytes(), k.spec.DType, k.spec.Op, k.t.size); err != nil {
			k.fail(err)
			return
		}
		k.opDoneLocal(o)
	}
}

// amount says n bytes of the collective's data as its user counts them, in elements
// of Args.DType: "1024 int32 (4096 bytes)"; in bytes where they are no whole number
// of elements (a corrupt size) or the collective has no datatype (a barrier).
func (k *task) amount(n int) string {
	sz := k.spec.DType.Size()
	if k.spec.Type == collective.Barrier {
		sz = 0 // its DType, if any, is nobody's
	}
	switch {
	case sz == 1:
		return fmt.Sprintf("%d %v", n, k.spec.DType)
	case sz > 1 && n%sz == 0:
		return fmt.Sprintf("%d %v (%d bytes)", n/sz, k.spec.DType, n)
	}
	return fmt.Sprintf("%d bytes", n)
}

// peerAmount is amount for n bytes of a peer whose signature is sig: in this rank's
// datatype where the signatures agree (they cover the datatype), in bytes otherwise,
// since the peer's datatype may be another.
func (k *task) peerAmount(n int, sig uint32) string {
	if sig != k.sig {
		return fmt.Sprintf("%d bytes", n)
	}
	return k.amount(n)
}

// issue queues a send's work requests once the receiver's buffer is known.
func (k *task) issue(o *op) {
	if o.eager && !o.rts {
		k.issueEager(o)
		return
	}
	r := &o.rtr
	if r.n != o.n || r.sig != k.sig {
		why := fmt.Sprintf("rank %d expects %s for tag %d, rank %d sends %s", r.peer, k.peerAmount(r.n, r.sig), o.tag, k.t.rank, k.amount(o.n))
		if r.n == o.n {
			why = fmt.Sprintf("rank %d runs a different collective, count or algorithm than rank %d's %v %s", r.peer, k.t.rank, k.spec.Type, k.alg)
		}
		k.mismatch(*r, why)
		return
	}
	if k.ready != nil {
		j, ok := k.readyWRs(o)
		if !ok {
			return
		}
		if j < len(o.wrs) {
			if j > o.early {
				if o.early == 0 {
					o.wrsLeft = len(o.wrs)
				}
				k.queueWRs(o, o.early, j)
				k.srcAhead += int(o.offs[j] - o.offs[o.early])
				o.early = j
			}
			k.waitForSrc(o)
			return
		}
	}
	o.state = opPosted
	if o.early == 0 {
		o.wrsLeft = len(o.wrs)
	}
	k.queueWRs(o, o.early, len(o.wrs)) // after those forwardReduced queued
	o.early = len(o.wrs)
}

// queueWRs queues work requests [from, to) of send o, aimed at its ready-to-receive.
func (k *task) queueWRs(o *op, from, to int) {
	r := &o.rtr
	pe := k.t.link(o.peer)
	for j := from; j < to; j++ {
		w := &o.wrs[j]
		if w.Op != verbs.OpSendWithImm {
			w.RemoteAddr = r.addr + o.offs[j]
			w.RKey = r.rkey
		}
		it := pe.queue.push()
		it.kind, it.k, it.post, it.op, it.wr = itemData, k, k.post, o.idx, int32(j)
	}
}

func (k *task) onRTR(m rtr) {
	if m.tag >= len(k.sendByTag) || k.sendByTag[m.tag] < 0 {
		switch {
		case k.started && m.post == k.post:
			k.strayRTR(m)
		case (!k.started || m.post > k.post) && !k.hasStray:
			// Its post has not started here: the evidence waits for it (Post).
			k.stray, k.strayWhy, k.hasStray = m, "", true
		}
		return
	}
	o := &k.ops[k.sendByTag[m.tag]]
	if o.peer != m.peer {
		k.mismatch(m, fmt.Sprintf("rank %d is ready for tag %d, which rank %d sends to rank %d", m.peer, m.tag, k.t.rank, o.peer))
		return
	}
	if m.refused && (!o.eager || o.rts) {
		// The receiver refused this rank's header (a rendezvous request, or a size):
		// evidence, with no destination to write to, whatever its size and signature
		// say (they may agree, where the receiver takes the tag from another rank).
		why := k.refusedWhy(o, m)
		switch {
		case k.started && m.post == k.post:
			k.mismatch(m, why)
		case (!k.started || m.post > k.post) && !k.hasStray:
			k.stray, k.strayWhy, k.hasStray = m, why, true
		}
		return
	}
	if m.sig != k.sig && !o.eager {
		// Evidence now, not when the send starts: coll may count on this message
		// to show a mismatch (Tells). (An eager send's answer is eagerNak's.)
		why := fmt.Sprintf("rank %d runs a different collective, count or algorithm than rank %d's %v %s", m.peer, k.t.rank, k.spec.Type, k.alg)
		switch {
		case k.started && m.post == k.post:
			k.mismatch(m, why)
		case (!k.started || m.post > k.post) && !k.hasStray:
			k.stray, k.strayWhy, k.hasStray = m, why, true
		}
		return
	}
	if m.sig == k.sig {
		k.seen(m.peer)
	}
	switch {
	case m.post == k.post && k.started && o.eager && !o.rts:
		// The receiver answered an eager send: it expects something else.
		k.eagerNak(o, m)
	case m.post == k.post && k.started:
		o.rtr, o.haveRTR = m, m.post
		if o.state == opWaitRTR && !k.aborted {
			k.issue(o)
		}
	case m.post > k.post || !k.started:
		o.nextRTR[m.post%2], o.haveNxt[m.post%2] = m, m.post
	}
}

// strayRTR fails the task with a ready-to-receive for a tag it does not send.
func (k *task) strayRTR(m rtr) {
	k.mismatch(m, fmt.Sprintf("rank %d is ready for tag %d, which rank %d does not send (the ranks run different collectives, roots or algorithms; rank %d runs %s)",
		m.peer, m.tag, k.t.rank, k.t.rank, k.alg))
}

// mismatch fails the task with the disagreement that ready-to-receive m shows; when
// the roots differ, it says so, naming both. The text names ranks, not "this rank":
// the other ranks read it in the abort this rank floods.
func (k *task) mismatch(m rtr, why string) {
	if me := k.root(); me != noRoot && m.root != noRoot && m.root != me {
		why = fmt.Sprintf("root mismatch: rank %d has root %d, rank %d has root %d (every rank must pass the same Root)", m.peer, m.root, k.t.rank, me)
	}
	k.fail(fmt.Errorf("tlmlx5: %v #%d: %w: %s", k.spec.Type, k.seq, driver.ErrMismatch, why))
}

// root is the collective's root on the wire: noRoot for an unrooted one.
func (k *task) root() int {
	if !k.spec.Type.IsRooted() {
		return noRoot
	}
	return k.spec.Root
}

func (k *task) opDoneLocal(o *op) {
	o.state = opDone
	k.done++
	if o.out.b == k.out && o.out.n > o.landed && k.landed != nil && (o.kind == opRecv || o.kind == opCopy) {
		k.landed(o.out.off+o.landed, o.out.n-o.landed) // what partial writes did not report
	}
	for _, d := range o.next {
		n := &k.ops[d]
		n.left--
		if n.left == 0 {
			k.work = append(k.work, d)
		}
	}
}

// opDone is a completion: the operation and those it releases move on.
func (k *task) opDone(o *op) {
	k.opDoneLocal(o)
	k.run()
}

func (k *task) fail(err error) {
	if k.err == nil {
		k.err = err
	}
}

func (k *task) State() (bool, error) {
	if k.err != nil {
		return false, k.err
	}
	done := k.done == len(k.ops) && k.outstanding == 0
	if done && k.gdrFlush && !k.flushed {
		k.flushed = true
		if err := flushGPUDirect(); err != nil {
			k.fail(fmt.Errorf("tlmlx5: %v #%d: flushing the NIC's writes into GPU memory: %w", k.spec.Type, k.seq, err))
			return false, k.err
		}
	}
	return done, nil
}

func (k *task) Abort() { k.aborted = true }

func (k *task) Quiesced() bool { return k.outstanding == 0 }

func (k *task) Waiting() string {
	var parts []string
	for i := range k.ops {
		o := &k.ops[i]
		switch {
		case o.kind == opRecv && o.state == opPosted:
			parts = append(parts, fmt.Sprintf("data from rank %d (tag %d)", o.peer, o.tag))
		case o.kind == opSend && o.state == opWaitRTR:
			parts = append(parts, fmt.Sprintf("rank %d to be ready (tag %d)", o.peer, o.tag))
		case o.kind == opSend && o.state == opPosted:
			parts = append(parts, fmt.Sprintf("the write to rank %d (tag %d) to complete", o.peer, o.tag))
		case o.kind == opSend && o.state == opWaitSrc && o.early > 0:
			// Partly on the wire: the writes already posted are what an abort waits for.
			parts = append(parts, fmt.Sprintf("the write to rank %d (tag %d) to complete, and the staged copy-in of the rest of its source", o.peer, o.tag))
		case o.state == opWaitSrc:
			parts = append(parts, "the staged copy-in of its source")
		case o.kind == opCopy && o.state == opPosted:
			parts = append(parts, "its own local copy, through the NIC (loopback)")
		case o.state == opCopying:
			parts = append(parts, "its own local copy")
		}
		if len(parts) == 4 {
			parts = append(parts, "...")
			break
		}
	}
	return strings.Join(parts, ", ")
}

// Peers lists the ranks the task's sends and receives name (driver.Task.Peers): the
// graph the builder made is the same on every post, and a send of one rank is a
// receive of its peer, so the lists are symmetric.
func (k *task) Peers() []int {
	if k.peerList != nil { // a task reused from the cache: the same graph
		return k.peerList
	}
	peers := []int{}
	for i := range k.ops {
		if o := &k.ops[i]; (o.kind == opSend || o.kind == opRecv) && o.peer != k.t.rank {
			peers = append(peers, o.peer)
		}
	}
	slices.Sort(peers)
	k.peerList = slices.Compact(peers)
	return k.peerList
}

// Writers lists the peers of the receives whose ready-to-receive for the post in
// flight went out (or is queued) and whose data has not landed (driver.Task.Writers):
// after Abort no receive starts any more (run), so no buffer is exposed anew. Left
// out: receives into the transport's own scratch, which a failed task never reads
// again and keeps at Close until the write lands or the peer answers, and RTRs sent
// ahead for a later post, likewise (quarantine.go).
func (k *task) Writers(buf []int) []int {
	for i := range k.ops {
		// An eager receive exposes no buffer of this rank's, unless it answered a
		// rendezvous request (rts): the peer writes into its eager ring.
		if o := &k.ops[i]; o.kind == opRecv && o.awaitsWrite(o.peer) && k.scratchAt(o, k.post) == nil && !slices.Contains(buf, o.peer) {
			buf = append(buf, o.peer)
		}
	}
	return buf
}

// awaitsWrite reports whether receive o is posted and waits for peer from to write its
// data into this rank's buffer (not into its eager ring, unless it answered a
// rendezvous request): the writes that onData takes, and the exposure that Writers
// reports.
func (o *op) awaitsWrite(from int) bool {
	return o.peer == from && o.state == opPosted && (!o.eager || o.rts)
}

// unsentRTR notes that the ready-to-receive of receive op for post was dropped from the
// send queue unsent, its post aborted (or over): the peer never learns of that buffer
// and cannot write into it, so Writers no longer lists the peer for it, and an aborting
// rank neither waits for nor cuts off a peer that never got it (one that finished its
// part and went idle, say).
func (k *task) unsentRTR(op int32, post uint32, ahead bool) {
	if op < 0 || int(op) >= len(k.ops) {
		return
	}
	o := &k.ops[op]
	switch {
	case ahead && o.ahead == post && !o.aheadIn:
		o.ahead = 0
	case k.aborted && k.post == post && o.kind == opRecv && o.state == opPosted:
		// This post's RTR, queued by this post or sent ahead by the last and taken.
		o.state = opDone
	}
}

// BreakLink moves a QP the task uses to the error state (fault.QPErr).
func (k *task) BreakLink() error {
	for i := range k.ops {
		if o := &k.ops[i]; o.kind == opSend || o.kind == opRecv {
			return k.t.breakLink(o.peer)
		}
	}
	for _, pe := range k.t.linked {
		if pe.qp != nil && !pe.down {
			// Taken down as an op's link would be, so that the peer is told
			// (tellDown): a lazy peer waiting only to receive hears of it no other way.
			return k.t.breakLink(pe.rank)
		}
	}
	return nil
}

func (k *task) Close() error {
	if k.outstanding > 0 {
		return fmt.Errorf("tlmlx5: %v #%d: %d work requests outstanding: %w", k.spec.Type, k.seq, k.outstanding, driver.ErrBusy)
	}
	t := k.t
	if k.armedAhead > 0 {
		k.dropAhead()
		if k.aborted || k.err != nil {
			k.quarantineAhead()
		}
	}
	if k.aborted || k.err != nil {
		k.dropUnsent()
		k.quarantineCurrent()
	}
	keep := k.keepable()
	if !keep {
		// Decided once: a release that fails part-way leaves a task that a retried
		// Close must not find keepable.
		k.cacheKey = false
		if err := k.release(); err != nil {
			return err
		}
	}
	if len(t.early) > 0 {
		k.dropEarly(0)
	}
	delete(t.srcWait, k)
	t.notePieces()
	if t.tasks[k.seq] == k {
		delete(t.tasks, k.seq)
	}
	if t.bySeq[seqKey(k.seq)] == k {
		delete(t.bySeq, seqKey(k.seq))
	}
	if t.byID[k.id] == k {
		delete(t.byID, k.id)
	}
	if keep {
		t.keep(k)
	}
	return nil
}

// release drops the task's registrations and frees its scratch, in reverse order of
// making. A buffer whose deregistration or free fails stays in k.bufs, as it is, so
// that a later release tries it again (a retried Close, or for a task out of the
// cache, t.unreleased's retries); memory is never freed under a registration that
// stayed.
func (k *task) release() error {
	var errs []error
	left := k.bufs[:0:0]
	for i := len(k.bufs) - 1; i >= 0; i-- {
		b := k.bufs[i]
		if b.reg != nil {
			if err := k.t.cache.release(b.reg); err != nil {
				errs = append(errs, err)
				left = append(left, b)
				continue
			}
			b.reg = nil
		}
		if b.own != nil {
			if err := b.own.Close(); err != nil {
				errs = append(errs, err)
				left = append(left, b)
				continue
			}
			b.own = nil
		}
	}
	if len(left) == 0 {
		k.bufs = nil
		return nil
	}
	slices.Reverse(left)
	k.bufs = left
	return errors.Join(errs...)
}
