package tlmlx5

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
)

// builder makes a task's operation graph.
type builder struct {
	k               *task
	t               *team
	n, me, root, dt int
	src, dst        *lbuf
	name            string
	radix           int
}

// Algorithm names per collective; the first is the default unless defaultAlg says
// otherwise by size.
var algNames = map[coll.CollType][]string{
	coll.Barrier:   {"agree"},
	coll.Bcast:     {"knomial", "chain"},
	coll.Gather:    {"linear", "knomial"},
	coll.Gatherv:   {"linear"},
	coll.Scatter:   {"linear", "knomial"},
	coll.Scatterv:  {"linear"},
	coll.Reduce:    {"knomial"},
	coll.Allgather: {"ring", "rd"},
	coll.Allreduce: {"rd", "ring"},
	coll.Alltoall:  {"pairwise"},
}

// Algorithms lists the algorithm names of a collective.
func Algorithms(c coll.CollType) []string { return append([]string(nil), algNames[c]...) }

const (
	defaultRadix  = 4
	chainChunk    = 128 << 10
	maxChunks     = 1024
	chainWindow   = 16
	sendWindow    = 8
	largeBcast    = 256 << 10
	largeAllred   = 64 << 10
	largeGatherNB = 32 << 10
)

// pickAlg resolves the algorithm from its name ("knomial:4") or, when empty, from the
// message size and the team size, which every rank knows alike.
func (b *builder) pickAlg(spec *coll.TaskSpec, bytes int) error {
	names := algNames[spec.Type]
	name := spec.Alg
	b.radix = defaultRadix
	if name != "" {
		n, r, hasR := strings.Cut(name, ":")
		name = n
		if hasR {
			v, err := strconv.Atoi(r)
			if err != nil || v < 2 {
				return fmt.Errorf("tlmlx5: algorithm %q: radix must be an integer >= 2: %w", spec.Alg, coll.ErrInvalid)
			}
			b.radix = v
		}
		ok := false
		for _, a := range names {
			ok = ok || a == name
		}
		if !ok {
			return fmt.Errorf("tlmlx5: algorithm %q is not one of %s's (%s): %w", spec.Alg, spec.Type, strings.Join(names, ", "), coll.ErrInvalid)
		}
	} else {
		name = names[0]
		switch spec.Type {
		case coll.Bcast:
			if bytes >= largeBcast && b.n > 2 {
				name = "chain"
			}
		case coll.Gather, coll.Scatter:
			if b.n > 16 && bytes < largeGatherNB {
				name = "knomial"
			}
		case coll.Allgather:
			if b.n&(b.n-1) == 0 && bytes < largeGatherNB {
				name = "rd"
			} else {
				name = "ring"
			}
		case coll.Allreduce:
			if bytes >= largeAllred && b.n > 2 {
				name = "ring"
			}
		}
	}
	if name == "rd" && spec.Type == coll.Allgather && b.n&(b.n-1) != 0 {
		return fmt.Errorf("tlmlx5: allgather rd needs a power-of-two team, not %d ranks: %w", b.n, coll.ErrInvalid)
	}
	b.name = name
	b.k.alg = name
	if name == "knomial" {
		b.k.alg = fmt.Sprintf("knomial:%d", b.radix)
	}
	return nil
}

// user registers a buffer the collective uses (the user's or asym's scratch).
func (b *builder) user(tb coll.TLBuf) (*lbuf, error) {
	if tb.Bytes == 0 {
		return &lbuf{}, nil
	}
	if tb.Type != mem.Host {
		return nil, fmt.Errorf("tlmlx5: a %v buffer reached the TL unstaged: %w", tb.Type, mem.ErrNotSupported)
	}
	fault := func() error { return b.t.p.Fault(coll.FaultReg) }
	var (
		e   *regEntry
		err error
		lb  = &lbuf{n: tb.Bytes}
	)
	switch {
	case tb.Slice != nil:
		e, err = b.t.cache.acquire(tb.Slice, nil, 0, 0, fault)
		lb.host = tb.Slice[:tb.Bytes]
		lb.addr = tb.Addr
	case tb.Buf != nil:
		e, err = b.t.cache.acquire(nil, tb.Buf, 0, 0, fault)
		lb.addr = tb.Buf.Addr()
		lb.host = hostBytes(lb.addr, tb.Bytes)
	default:
		e, err = b.t.cache.acquire(nil, nil, tb.Addr, tb.Bytes, fault)
		lb.addr = tb.Addr
		lb.host = hostBytes(lb.addr, tb.Bytes)
	}
	if err != nil {
		return nil, err
	}
	lb.reg = e
	b.k.bufs = append(b.k.bufs, lb)
	return lb, nil
}

// scratch allocates and registers n bytes of host memory for the task's lifetime.
func (b *builder) scratch(n int) (*lbuf, error) {
	if n == 0 {
		return &lbuf{}, nil
	}
	if err := b.t.p.Fault(coll.FaultAlloc); err != nil {
		return nil, fmt.Errorf("tlmlx5: scratch of %d bytes: %w", n, err)
	}
	buf, err := mem.Alloc(mem.Host, n)
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: scratch: %w", err)
	}
	lb := &lbuf{addr: buf.Addr(), n: n, host: buf.Bytes()[:n], own: buf}
	b.k.bufs = append(b.k.bufs, lb)
	lb.reg, err = b.t.cache.acquire(nil, buf, 0, 0, func() error { return b.t.p.Fault(coll.FaultReg) })
	if err != nil {
		return nil, err
	}
	lb.reg.scratch = true
	return lb, nil
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

func (b *builder) reduceOp(out, x, y seg) int32 {
	return b.add(op{kind: opReduce, out: out, a: x, b: y})
}

func (b *builder) final(out seg) int32 { return b.add(op{kind: opFinal, out: out}) }

// after makes o wait for deps (negative ones are ignored).
func (b *builder) after(o int32, deps ...int32) {
	for _, d := range deps {
		if d >= 0 {
			b.k.ops[d].next = append(b.k.ops[d].next, o)
		}
	}
}

func sg(b *lbuf, off, n int) seg { return seg{b: b, off: off, n: n} }

func (b *builder) build() error {
	spec := &b.k.spec
	bytes := max(spec.Src.Bytes, spec.Dst.Bytes)
	switch spec.Type {
	case coll.Gather:
		bytes = b.blockBytes()
	case coll.Scatter:
		bytes = b.blockBytes()
	}
	if err := b.pickAlg(spec, bytes); err != nil {
		return err
	}
	switch spec.Type {
	case coll.Barrier:
		return nil
	case coll.Gather:
		if b.name == "linear" {
			b.radix = b.n
		}
		return b.gather()
	case coll.Scatter:
		if b.name == "linear" {
			b.radix = b.n
		}
		return b.scatter()
	case coll.Gatherv:
		return b.gatherv()
	case coll.Scatterv:
		return b.scatterv()
	case coll.Bcast:
		if b.name == "chain" {
			return b.bcastChain()
		}
		return b.bcastKnomial()
	case coll.Reduce:
		return b.reduce()
	case coll.Allgather:
		if b.name == "rd" {
			return b.allgatherRD()
		}
		return b.allgatherRing()
	case coll.Allreduce:
		if b.name == "ring" && b.n > 1 {
			return b.allreduceRing()
		}
		return b.allreduceRD()
	case coll.Alltoall:
		return b.alltoall()
	}
	return fmt.Errorf("tlmlx5: %v: %w", spec.Type, coll.ErrNotSupported)
}

// blockBytes is the per-rank block of gather and scatter.
func (b *builder) blockBytes() int {
	s := &b.k.spec
	root := b.me == s.Root
	switch s.Type {
	case coll.Gather:
		if root {
			return s.Dst.Bytes / b.n
		}
		return s.Src.Bytes
	case coll.Scatter:
		if root {
			return s.Src.Bytes / b.n
		}
		return s.Dst.Bytes
	}
	return 0
}

// kn is a node of a k-nomial tree over virtual ranks (rank - root mod n).
type kn struct {
	v        int
	parent   int // virtual; -1 at the root
	children []knChild
	size     int // of the subtree
}

type knChild struct{ v, size int }

func knomialNode(n, v, radix int) kn {
	node := kn{v: v, parent: -1}
	m := 1
	for m < n {
		if v%(m*radix) != 0 {
			node.parent = v - v%(m*radix)
			break
		}
		for j := 1; j < radix && v+j*m < n; j++ {
			c := v + j*m
			node.children = append(node.children, knChild{c, min(m, n-c)})
		}
		m *= radix
	}
	node.size = min(m, n-v)
	return node
}

func (b *builder) real(v int) int { return (v + b.root) % b.n }

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

// rootSeg is virtual blocks [lo, hi) of a rank-ordered buffer (the root's), which
// contain no wrap point.
func (b *builder) rootSegs(buf *lbuf, blk, lo, hi int) []seg {
	var out []seg
	for _, p := range pieces(lo, hi, b.n-b.root) {
		out = append(out, sg(buf, b.real(p[0])*blk, (p[1]-p[0])*blk))
	}
	return out
}

// gather: k-nomial (linear is radix n). A non-root gathers its subtree into scratch
// (its own block stays in src: the send to its parent takes it from there), and sends
// it up; the root receives straight into dst, split at the rank wrap.
func (b *builder) gather() error {
	blk := b.blockBytes()
	v := (b.me - b.root + b.n) % b.n
	node := knomialNode(b.n, v, b.radix)
	wrap := b.n - b.root
	if v == 0 {
		for _, c := range node.children {
			for i, p := range pieces(c.v, c.v+c.size, wrap) {
				b.recv(b.real(c.v), c.v*4+i, sg(b.dst, b.real(p[0])*blk, (p[1]-p[0])*blk))
			}
		}
		if !b.k.spec.InPlace && b.n > 0 {
			b.copyOp(sg(b.dst, b.me*blk, blk), sg(b.src, 0, blk))
		}
		return nil
	}
	var sub *lbuf
	var err error
	if len(node.children) > 0 {
		if sub, err = b.scratch((node.size - 1) * blk); err != nil {
			return err
		}
	}
	local := func(lo, hi int) []seg { // virtual blocks of this subtree, in order
		var out []seg
		if lo == v {
			out = append(out, sg(b.src, 0, blk))
			lo++
		}
		if hi > lo {
			out = append(out, sg(sub, (lo-v-1)*blk, (hi-lo)*blk))
		}
		return out
	}
	var recvs []int32
	for _, c := range node.children {
		recvs = append(recvs, b.recv(b.real(c.v), c.v*4, sg(sub, (c.v-v-1)*blk, c.size*blk)))
	}
	var splits []int
	if node.parent == 0 {
		splits = []int{wrap}
	}
	for i, p := range pieces(v, v+node.size, splits...) {
		s := b.send(b.real(node.parent), v*4+i, local(p[0], p[1])...)
		b.after(s, recvs...)
	}
	return nil
}

// scatter: the mirror of gather. A non-root receives its own block into dst and its
// children's blocks into scratch, then forwards them.
func (b *builder) scatter() error {
	blk := b.blockBytes()
	v := (b.me - b.root + b.n) % b.n
	node := knomialNode(b.n, v, b.radix)
	if v == 0 {
		for _, c := range node.children {
			for i, p := range pieces(c.v, c.v+c.size, c.v+1) {
				b.send(b.real(c.v), c.v*4+i, b.rootSegs(b.src, blk, p[0], p[1])...)
			}
		}
		if !b.k.spec.InPlace {
			b.copyOp(sg(b.dst, 0, blk), sg(b.src, b.me*blk, blk))
		}
		return nil
	}
	var sub *lbuf
	var err error
	if node.size > 1 {
		if sub, err = b.scratch((node.size - 1) * blk); err != nil {
			return err
		}
	}
	parts := pieces(v, v+node.size, v+1)
	b.recv(b.real(node.parent), v*4, sg(b.dst, 0, blk))
	if len(parts) > 1 {
		rest := b.recv(b.real(node.parent), v*4+1, sg(sub, 0, (node.size-1)*blk))
		for _, c := range node.children {
			for i, p := range pieces(c.v, c.v+c.size, c.v+1) {
				s := b.send(b.real(c.v), c.v*4+i, sg(sub, (p[0]-v-1)*blk, (p[1]-p[0])*blk))
				b.after(s, rest)
			}
		}
	}
	return nil
}

func (b *builder) gatherv() error {
	s := &b.k.spec
	if b.me != s.Root {
		b.send(s.Root, b.me, sg(b.src, 0, s.Src.Bytes))
		return nil
	}
	c, d := s.Dst.Counts, s.Dst.Displs
	for p := 0; p < b.n; p++ {
		if p == b.me {
			if !s.InPlace {
				b.copyOp(sg(b.dst, d[p]*b.dt, c[p]*b.dt), sg(b.src, 0, c[p]*b.dt))
			}
			continue
		}
		b.recv(p, p, sg(b.dst, d[p]*b.dt, c[p]*b.dt))
	}
	return nil
}

// scatterv: linear, with at most sendWindow writes in flight so that a large team
// does not flood the root's send queue.
func (b *builder) scatterv() error {
	s := &b.k.spec
	if b.me != s.Root {
		b.recv(s.Root, b.me, sg(b.dst, 0, s.Dst.Bytes))
		return nil
	}
	c, d := s.Src.Counts, s.Src.Displs
	var sends []int32
	for i := 1; i < b.n; i++ {
		p := (b.me + i) % b.n
		o := b.send(p, p, sg(b.src, d[p]*b.dt, c[p]*b.dt))
		if len(sends) >= sendWindow {
			b.after(o, sends[len(sends)-sendWindow])
		}
		sends = append(sends, o)
	}
	if !s.InPlace {
		b.copyOp(sg(b.dst, 0, c[b.me]*b.dt), sg(b.src, d[b.me]*b.dt, c[b.me]*b.dt))
	}
	return nil
}

func (b *builder) bcastKnomial() error {
	n := b.k.spec.Src.Bytes
	v := (b.me - b.root + b.n) % b.n
	node := knomialNode(b.n, v, b.radix)
	var in int32 = -1
	if v != 0 {
		in = b.recv(b.real(node.parent), v, sg(b.src, 0, n))
	}
	for _, c := range node.children {
		s := b.send(b.real(c.v), c.v, sg(b.src, 0, n))
		b.after(s, in)
	}
	return nil
}

// bcastChain pipelines chunks down the chain of virtual ranks; each rank forwards a
// chunk as soon as it arrived, and asks for at most chainWindow chunks ahead.
func (b *builder) bcastChain() error {
	n := b.k.spec.Src.Bytes
	chunk := max(chainChunk, (n+maxChunks-1)/maxChunks)
	nch := max(1, (n+chunk-1)/chunk)
	v := (b.me - b.root + b.n) % b.n
	var recvs []int32
	for i := 0; i < nch; i++ {
		off := i * chunk
		m := min(chunk, n-off)
		var in int32 = -1
		if v > 0 {
			in = b.recv(b.real(v-1), i, sg(b.src, off, m))
			if i >= chainWindow {
				b.after(in, recvs[i-chainWindow])
			}
			recvs = append(recvs, in)
		}
		if v < b.n-1 {
			s := b.send(b.real(v+1), i, sg(b.src, off, m))
			b.after(s, in)
		}
	}
	return nil
}

// reduce: k-nomial; each rank combines its children's vectors with its own and sends
// the result up. The root combines into dst and, for avg, divides at the end.
func (b *builder) reduce() error {
	s := &b.k.spec
	n := max(s.Src.Bytes, s.Dst.Bytes)
	v := (b.me - b.root + b.n) % b.n
	node := knomialNode(b.n, v, b.radix)
	in := sg(b.src, 0, n)
	var acc seg
	if v == 0 {
		acc = sg(b.dst, 0, n)
		if s.InPlace {
			in = acc
		}
	} else if len(node.children) > 0 {
		sc, err := b.scratch(n)
		if err != nil {
			return err
		}
		acc = sg(sc, 0, n)
	}
	var last int32 = -1
	cur := in
	for _, c := range node.children {
		tmp, err := b.scratch(n)
		if err != nil {
			return err
		}
		r := b.recv(b.real(c.v), c.v, sg(tmp, 0, n))
		red := b.reduceOp(acc, cur, sg(tmp, 0, n))
		b.after(red, r, last)
		last, cur = red, acc
	}
	if v == 0 {
		if len(node.children) == 0 && !s.InPlace {
			last = b.copyOp(acc, in)
		}
		if s.Op == coll.OpAvg {
			f := b.final(acc)
			b.after(f, last)
		}
		return nil
	}
	snd := b.send(b.real(node.parent), v, cur)
	b.after(snd, last)
	return nil
}

func (b *builder) allgatherRing() error {
	s := &b.k.spec
	blk := s.Dst.Bytes / b.n
	own := sg(b.src, 0, blk)
	if s.InPlace {
		own = sg(b.dst, b.me*blk, blk)
	} else {
		b.copyOp(sg(b.dst, b.me*blk, blk), own)
	}
	right, left := (b.me+1)%b.n, (b.me-1+b.n)%b.n
	var prev int32 = -1
	for st := 0; st < b.n-1; st++ {
		sb := (b.me - st + b.n) % b.n
		rb := (b.me - st - 1 + 2*b.n) % b.n
		data := sg(b.dst, sb*blk, blk)
		if st == 0 {
			data = own
		}
		snd := b.send(right, st, data)
		b.after(snd, prev)
		prev = b.recv(left, st, sg(b.dst, rb*blk, blk))
	}
	return nil
}

func (b *builder) allgatherRD() error {
	s := &b.k.spec
	blk := s.Dst.Bytes / b.n
	var prev []int32
	if !s.InPlace {
		prev = append(prev, b.copyOp(sg(b.dst, b.me*blk, blk), sg(b.src, 0, blk)))
	}
	for st := 0; 1<<st < b.n; st++ {
		d := 1 << st
		partner := b.me ^ d
		base, pbase := b.me&^(d-1), partner&^(d-1)
		snd := b.send(partner, st, sg(b.dst, base*blk, d*blk))
		b.after(snd, prev...)
		rcv := b.recv(partner, st, sg(b.dst, pbase*blk, d*blk))
		prev = append(prev, rcv)
	}
	return nil
}

// allreduceRD is recursive doubling; a team that is not a power of two first folds
// its extra ranks into their neighbours and hands them the result at the end.
func (b *builder) allreduceRD() error {
	s := &b.k.spec
	n := s.Dst.Bytes
	acc := sg(b.dst, 0, n)
	var last int32 = -1
	if !s.InPlace {
		last = b.copyOp(acc, sg(b.src, 0, n))
	}
	p2 := 1 << (bits.Len(uint(b.n)) - 1)
	rem := b.n - p2
	const foldTag, unfoldTag = 0, 63
	nv := -1
	switch {
	case b.me < 2*rem && b.me%2 == 0:
		snd := b.send(b.me+1, foldTag, acc)
		b.after(snd, last)
		r := b.recv(b.me+1, unfoldTag, acc)
		b.after(r, snd)
		return nil
	case b.me < 2*rem:
		tmp, err := b.scratch(n)
		if err != nil {
			return err
		}
		r := b.recv(b.me-1, foldTag, sg(tmp, 0, n))
		red := b.reduceOp(acc, acc, sg(tmp, 0, n))
		b.after(red, r, last)
		last = red
		nv = b.me / 2
	default:
		nv = b.me - rem
	}
	realOf := func(pv int) int {
		if pv < rem {
			return pv*2 + 1
		}
		return pv + rem
	}
	for st := 0; 1<<st < p2; st++ {
		partner := realOf(nv ^ (1 << st))
		tmp, err := b.scratch(n)
		if err != nil {
			return err
		}
		snd := b.send(partner, 1+st, acc)
		b.after(snd, last)
		r := b.recv(partner, 1+st, sg(tmp, 0, n))
		red := b.reduceOp(acc, acc, sg(tmp, 0, n))
		b.after(red, snd, r)
		last = red
	}
	if s.Op == coll.OpAvg {
		f := b.final(acc)
		b.after(f, last)
		last = f
	}
	if b.me < 2*rem {
		snd := b.send(b.me-1, unfoldTag, acc)
		b.after(snd, last)
	}
	return nil
}

// allreduceRing is a reduce-scatter ring then an allgather ring over n chunks.
func (b *builder) allreduceRing() error {
	s := &b.k.spec
	n := s.Dst.Bytes
	cnt := n / b.dt
	chunkOff := func(i int) (int, int) {
		base, extra := cnt/b.n, cnt%b.n
		off := i*base + min(i, extra)
		l := base
		if i < extra {
			l++
		}
		return off * b.dt, l * b.dt
	}
	acc := func(i int) seg { o, l := chunkOff(i); return sg(b.dst, o, l) }
	var init int32 = -1
	if !s.InPlace {
		init = b.copyOp(sg(b.dst, 0, n), sg(b.src, 0, n))
	}
	_, maxLen := chunkOff(0)
	tmp, err := b.scratch((b.n - 1) * maxLen)
	if err != nil {
		return err
	}
	right, left := (b.me+1)%b.n, (b.me-1+b.n)%b.n
	mod := func(x int) int { return ((x % b.n) + b.n) % b.n }
	rsSend := make([]int32, b.n-1)
	last := init
	for st := 0; st < b.n-1; st++ {
		sc, rc := mod(b.me-st), mod(b.me-st-1)
		snd := b.send(right, st, acc(sc))
		b.after(snd, last, init)
		rsSend[st] = snd
		_, l := chunkOff(rc)
		r := b.recv(left, st, sg(tmp, st*maxLen, l))
		red := b.reduceOp(acc(rc), acc(rc), sg(tmp, st*maxLen, l))
		b.after(red, r)
		last = red
	}
	if s.Op == coll.OpAvg {
		f := b.final(acc(mod(b.me + 1)))
		b.after(f, last)
		last = f
	}
	for st := 0; st < b.n-1; st++ {
		sc, rc := mod(b.me+1-st), mod(b.me-st)
		snd := b.send(right, b.n+st, acc(sc))
		b.after(snd, last)
		r := b.recv(left, b.n+st, acc(rc))
		b.after(r, rsSend[st])
		last = r
	}
	return nil
}

// alltoall: pairwise exchange, at most sendWindow writes in flight. In place, blocks
// arrive in scratch and move to dst once the block they replace has been sent.
func (b *builder) alltoall() error {
	s := &b.k.spec
	blk := s.Dst.Bytes / b.n
	src := b.src
	if s.InPlace {
		src = b.dst
	} else {
		b.copyOp(sg(b.dst, b.me*blk, blk), sg(b.src, b.me*blk, blk))
	}
	var tmp *lbuf
	if s.InPlace && b.n > 1 {
		var err error
		if tmp, err = b.scratch(b.n * blk); err != nil {
			return err
		}
	}
	sends := make([]int32, b.n)
	recvs := make([]int32, b.n)
	for st := 1; st < b.n; st++ {
		to, from := (b.me+st)%b.n, (b.me-st+b.n)%b.n
		sends[st] = b.send(to, st, sg(src, to*blk, blk))
		if st > sendWindow {
			b.after(sends[st], sends[st-sendWindow])
		}
		into := sg(b.dst, from*blk, blk)
		if tmp != nil {
			into = sg(tmp, from*blk, blk)
		}
		recvs[st] = b.recv(from, st, into)
	}
	if tmp != nil {
		for st := 1; st < b.n; st++ {
			from := (b.me - st + b.n) % b.n
			c := b.copyOp(sg(b.dst, from*blk, blk), sg(tmp, from*blk, blk))
			b.after(c, recvs[st], sends[b.n-st])
		}
	}
	return nil
}
