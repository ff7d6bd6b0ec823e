package tlmlx5

import (
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/topo"
)

// reduce: k-nomial; each rank combines its children's vectors with its own and sends
// the result up. The root combines into dst and, for avg, divides at the end. The
// children of one level (radix-1 subtrees of one size, which finish about together)
// are folded in one pass once all of them have arrived: each received vector is read
// once, and the running result once per level instead of once per child.
func (b *builder) reduceKnomial() error {
	s := b.spec
	n := max(s.Src.Bytes, s.Dst.Bytes)
	v := b.v()
	node := topo.KNomial(b.n, v, b.radix)
	in := sg(b.src, 0, n)
	var acc seg
	if v == 0 {
		acc = sg(b.dst, 0, n)
		if s.InPlace {
			in = acc
		}
	} else if len(node.Children) > 0 {
		sc, err := b.scratch(n)
		if err != nil {
			return err
		}
		acc = sg(sc, 0, n)
	}
	var last int32 = -1
	cur := in
	for _, level := range childLevels(v, b.radix, node.Children) {
		ins := []seg{cur}
		var recvs []int32
		for _, c := range level {
			tmp, err := b.scratch(n)
			if err != nil {
				return err
			}
			ins = append(ins, sg(tmp, 0, n))
			recvs = append(recvs, b.recv(b.real(c.V), c.V, sg(tmp, 0, n)))
		}
		red := b.reduceOp(acc, ins...)
		b.after(red, append(recvs, last)...)
		last, cur = red, acc
	}
	if v == 0 {
		if len(node.Children) == 0 && !s.InPlace {
			last = b.copyOp(acc, in)
		}
		if s.Op == collective.OpAvg {
			f := b.final(acc)
			b.after(f, last)
		}
		return nil
	}
	snd := b.send(b.real(node.Parent), v, cur)
	b.after(snd, last)
	return nil
}

// childLevels splits a k-nomial node's children (in topo.KNomial's order) by level:
// the children at distance m..(radix-1)×m from v, for m = 1, radix, radix², ...
func childLevels(v, radix int, children []topo.Child) [][]topo.Child {
	var out [][]topo.Child
	m := 0
	for _, c := range children {
		if d := c.V - v; m == 0 || d >= m*radix {
			for m = max(m, 1); d >= m*radix; m *= radix {
			}
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], c)
	}
	return out
}

// reduceScatterGather (srg) is reduce for large vectors: a reduce-scatter ring leaves
// chunk r of the result on rank r, and every rank writes its chunk straight into the
// root's destination. Every rank sends and receives about 2× the vector once, where
// the k-nomial tree sends the whole vector per level.
func (b *builder) reduceScatterGather() error {
	s := b.spec
	n := max(s.Src.Bytes, s.Dst.Bytes)
	ch := chunks{count: n / b.dt, n: b.n, dt: b.dt}
	in := b.src
	if s.InPlace {
		in = b.dst
	}
	chunk := func(i int) seg { return ch.seg(in, topo.Mod(i, b.n)) }
	size := func(i int) int { _, l := ch.chunk(topo.Mod(i, b.n)); return l }
	root := b.me == s.Root
	out := ch.seg(b.dst, b.me)
	if !root {
		res, err := b.scratch(size(b.me))
		if err != nil {
			return err
		}
		out = sg(res, 0, size(b.me))
	}
	done, err := b.ringReduceScatter(chunk, size, out)
	if err != nil {
		return err
	}
	// The ring's tags are 0..n-2; rank p's chunk goes to the root with the next n-1
	// tags, in rank order from the root's right (2n-2 tags in all, see tagsOf).
	gatherTag := func(p int) int { return b.n - 1 + topo.Mod(p-s.Root-1, b.n) }
	if !root {
		snd := b.send(s.Root, gatherTag(b.me), out)
		b.after(snd, done)
		return nil
	}
	for p := 0; p < b.n; p++ {
		if p != b.me {
			r := b.recv(p, gatherTag(p), ch.seg(b.dst, p))
			if s.InPlace {
				// The chunk lands in the root's input: only once this
				// rank's own ring is done reading it.
				b.after(r, done)
			}
		}
	}
	return nil
}
