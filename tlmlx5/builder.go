package tlmlx5

import (
	"errors"
	"fmt"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/internal/topo"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// builder makes a task's operation graph: an algorithm's build function adds
// receives, sends, copies and reductions over segments of registered buffers, and
// orders them with after.
type builder struct {
	k               *task
	t               *team
	spec            *driver.TaskSpec
	n, me, root, dt int
	src, dst        *lbuf
	srcDM           *lbuf // a reduction's source in DM, copied into src at every post (srcin.go)
	alg             *algorithm
	radix           int
}

// Tree tags: a piece of a tree edge's data (an edge's data is split at the root's
// rank wrap, and a scatter edge into the child's own block and the rest) is tagged
// with the virtual rank of its first block. Both ends compute it from the piece alone;
// it is unique among one rank's receives and among its sends (the children's subtrees
// are disjoint, and a piece's first block lies in the subtree it is sent into), and
// below n, so a tree needs n tags (see tagsOf).

// user registers a buffer the collective uses (the user's or asym's scratch); name is
// its argument, for errors; receives says whether peers write into it.
func (b *builder) user(name string, tb driver.Buf, receives bool) (*lbuf, error) {
	if tb.Bytes == 0 {
		return &lbuf{}, nil
	}
	if tb.Type == mem.DM && b.t.c.handles(mem.DM) {
		if b.takesSrcIn(name, tb) {
			return b.srcIn(tb)
		}
		return b.dmBuf(name, tb)
	}
	if !b.t.c.handles(tb.Type) {
		return nil, fmt.Errorf("tlmlx5: a %v buffer reached the transport unstaged, but its reach is %v: %w", tb.Type, b.t.c.reach, driver.ErrNotSupported)
	}
	if b.spec.Type.IsReduction() && !b.t.c.handlesReduction(tb.Type) {
		return nil, fmt.Errorf("tlmlx5: a %v buffer reached a %v unstaged, but this transport reduces on the CPU, which reaches %v: %w",
			tb.Type, b.spec.Type, b.t.c.reach.CPU, driver.ErrNotSupported)
	}
	fault := func() error { return b.t.p.Faults.Hit(fault.Reg) }
	access := readAccess
	if receives {
		access = receiveAccess
	}
	var (
		e   *regEntry
		err error
		lb  = &lbuf{n: tb.Bytes, typ: tb.Type}
	)
	switch {
	case tb.Slice != nil:
		e, err = b.t.cache.acquire(tb.Slice, nil, 0, 0, access, fault)
		lb.host = tb.Slice[:tb.Bytes]
		lb.addr = tb.Addr
	case tb.Buf != nil:
		e, err = b.t.cache.acquire(nil, tb.Buf, 0, 0, access, fault)
		lb.addr = tb.Buf.Addr()
		lb.host = hostBytes(lb.addr, tb.Bytes)
		lb.stream = tb.Type == mem.Host && tb.Buf.Pinned()
	default:
		e, err = b.t.cache.acquire(nil, nil, tb.Addr, tb.Bytes, access, fault)
		lb.addr = tb.Addr
		lb.host = hostBytes(lb.addr, tb.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	lb.reg, lb.mr = e, e.mr
	b.k.bufs = append(b.k.bufs, lb)
	return lb, nil
}

// dmBuf uses a DM buffer of the context's pool in place, through the pool's MR:
// nothing is registered. Reductions are refused: they run on the CPU, which cannot
// address DM (the reach leaves DM out of its CPU set, so coll stages them), but for
// a source that the task copies in itself (srcin.go), which never comes here.
func (b *builder) dmBuf(name string, tb driver.Buf) (*lbuf, error) {
	if b.spec.Type.IsReduction() {
		return nil, fmt.Errorf("tlmlx5: %v: Args.%s is DM memory, which the CPU cannot address, and a reduction runs on the CPU: stage it through host memory: %w",
			b.spec.Type, name, driver.ErrNotSupported)
	}
	return b.dmChunkBuf(name, tb)
}

// dmChunkBuf is the local buffer of DM user buffer tb, whose argument is name.
func (b *builder) dmChunkBuf(name string, tb driver.Buf) (*lbuf, error) {
	ch, err := b.t.c.dmChunk("Args."+name, tb.Buf)
	if err != nil {
		return nil, err
	}
	if tb.Bytes > ch.Len() {
		return nil, fmt.Errorf("tlmlx5: Args.%s: the collective needs %d bytes, the DM buffer has %d: %w", name, tb.Bytes, ch.Len(), driver.ErrInvalid)
	}
	lb := &lbuf{addr: uintptr(ch.Addr()), n: tb.Bytes, mr: ch.Pool().MR(), dm: ch}
	b.k.bufs = append(b.k.bufs, lb)
	return lb, nil
}

// scratch allocates and registers n bytes of host memory for the task's lifetime.
func (b *builder) scratch(n int) (*lbuf, error) {
	if n == 0 {
		return &lbuf{}, nil
	}
	return b.k.scratch(n)
}

// scratch allocates and registers n > 0 bytes of host memory for the task's lifetime
// (released with it); the faults count each allocation and registration.
func (k *task) scratch(n int) (*lbuf, error) { return k.newScratch(n, false, scratchAccess) }

// errNoPin marks newScratch's failure to pin: a caller for which pinning is only a
// speed-up (doubleOutput) goes on without the buffer.
var errNoPin = errors.New("the CUDA driver did not pin it")

// pinBuffer is mem.Buffer.Pin; tests make it fail.
var pinBuffer = (*mem.Buffer).Pin

// newScratch is scratch, registered with access, and pinned for the CUDA copy engine
// when pin is set (before it is registered, so that soft0 writes it with non-temporal
// stores: mem.PinnedHost). A buffer that cannot be pinned is freed, and the error
// wraps errNoPin.
func (k *task) newScratch(n int, pin bool, access verbs.Access) (*lbuf, error) {
	t := k.t
	if err := t.p.Faults.Hit(fault.Alloc); err != nil {
		return nil, fmt.Errorf("tlmlx5: scratch of %d bytes: %w", n, err)
	}
	buf, err := mem.Alloc(mem.Host, n)
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: scratch: %w", err)
	}
	if pin {
		if err := pinBuffer(buf); err != nil {
			return nil, errors.Join(fmt.Errorf("tlmlx5: pinned scratch of %d bytes: %w: %w", n, errNoPin, err), buf.Close())
		}
	}
	lb := &lbuf{addr: buf.Addr(), n: n, host: buf.Bytes()[:n], own: buf, stream: pin}
	k.bufs = append(k.bufs, lb)
	lb.reg, err = t.cache.acquire(nil, buf, 0, 0, access, func() error { return t.p.Faults.Hit(fault.Reg) })
	if err != nil {
		return nil, err
	}
	lb.reg.scratch = true
	lb.mr = lb.reg.mr
	return lb, nil
}

// dropScratch releases lb, the last scratch newScratch made, before the task uses it.
// Its memory is freed only once its registration is gone: where that fails, lb stays
// the task's, for its release to try again.
func (k *task) dropScratch(lb *lbuf) error {
	if err := k.t.cache.release(lb.reg); err != nil {
		return err
	}
	lb.reg = nil
	if err := lb.own.Close(); err != nil {
		return err
	}
	lb.own = nil
	k.bufs = k.bufs[:len(k.bufs)-1]
	return nil
}

func (b *builder) add(o op) int32 {
	o.idx = int32(len(b.k.ops))
	b.k.ops = append(b.k.ops, o)
	return o.idx
}

func (b *builder) send(peer, tag int, segs ...seg) int32 {
	n := 0
	var ss []seg
	for _, s := range segs {
		if s.n > 0 {
			ss = append(ss, s)
			n += s.n
		}
	}
	return b.add(op{kind: opSend, peer: peer, tag: tag, segs: ss, n: n})
}

func (b *builder) recv(peer, tag int, into seg) int32 {
	return b.add(op{kind: opRecv, peer: peer, tag: tag, out: into, n: into.n})
}

func (b *builder) copyOp(dst, src seg) int32 { return b.add(op{kind: opCopy, out: dst, a: src}) }

// reduceOp is out = ins[0] op ins[1] op ..., in one pass over every input
// (reduce.IntoMany); out may be ins[0] but overlaps no other input.
func (b *builder) reduceOp(out seg, ins ...seg) int32 {
	return b.add(op{kind: opReduce, out: out, ins: ins, inb: make([][]byte, len(ins))})
}

func (b *builder) final(out seg) int32 { return b.add(op{kind: opFinal, out: out}) }

// finalIfAvg ends an avg on out after dep; it returns the operation that ends the
// reduction (dep itself for the other operators).
func (b *builder) finalIfAvg(out seg, dep int32) int32 {
	if b.spec.Op != collective.OpAvg {
		return dep
	}
	f := b.final(out)
	b.after(f, dep)
	return f
}

// after makes o wait for deps (negative ones are ignored).
func (b *builder) after(o int32, deps ...int32) {
	for _, d := range deps {
		if d >= 0 {
			b.k.ops[d].next = append(b.k.ops[d].next, o)
		}
	}
}

func sg(b *lbuf, off, n int) seg { return seg{b: b, off: off, n: n} }

// v is this rank's virtual rank (the root is 0).
func (b *builder) v() int { return topo.Virtual(b.me, b.root, b.n) }

func (b *builder) real(v int) int { return topo.Real(v, b.root, b.n) }

// pieces splits the virtual block range [lo, hi) at the points where the receiver's
// buffer is not contiguous: every piece lands in one contiguous region.
func pieces(lo, hi int, splits ...int) [][2]int {
	var out [][2]int
	start := lo
	for v := lo + 1; v < hi; v++ {
		for _, s := range splits {
			if v == s {
				out = append(out, [2]int{start, v})
				start = v
			}
		}
	}
	return append(out, [2]int{start, hi})
}

// rootSegs is virtual blocks [lo, hi) of a rank-ordered buffer (the root's), split at
// the rank wrap.
func (b *builder) rootSegs(buf *lbuf, blk, lo, hi int) []seg {
	var out []seg
	for _, p := range pieces(lo, hi, b.n-b.root) {
		out = append(out, sg(buf, b.real(p[0])*blk, (p[1]-p[0])*blk))
	}
	return out
}

// chunks splits count elements into n chunks as evenly as possible (the first
// count mod n one element longer); chunk(i) is its byte offset and length.
type chunks struct{ count, n, dt int }

func (c chunks) chunk(i int) (off, n int) {
	base, extra := c.count/c.n, c.count%c.n
	o := i*base + min(i, extra)
	l := base
	if i < extra {
		l++
	}
	return o * c.dt, l * c.dt
}

func (c chunks) max() int { _, l := c.chunk(0); return l }

// blockOf is chunk i of buf as a segment.
func (c chunks) seg(buf *lbuf, i int) seg { o, l := c.chunk(i); return sg(buf, o, l) }

// mismatch is an error in the collective's own arguments that coll's checks cannot
// see (they concern one rank's two buffers of a v-collective).
func (b *builder) mismatch(format string, args ...any) error {
	return fmt.Errorf("tlmlx5: %v: Args.%s: %w", b.spec.Type, fmt.Sprintf(format, args...), driver.ErrInvalid)
}
