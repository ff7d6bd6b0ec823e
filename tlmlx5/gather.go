package tlmlx5

import (
	"github.com/ibcoll/ibcoll/internal/topo"
)

// gatherLinear is gather with every rank sending straight to the root: the k-nomial
// tree of radix n.
func (b *builder) gatherLinear() error {
	b.radix = b.n
	return b.gather()
}

// gather: k-nomial (linear is radix n). A non-root gathers its subtree into scratch
// (its own block stays in src: the send to its parent takes it from there), and sends
// it up; the root receives straight into dst, split at the rank wrap.
func (b *builder) gather() error {
	blk := b.spec.Block * b.dt
	v := b.v()
	node := topo.KNomial(b.n, v, b.radix)
	wrap := b.n - b.root
	if v == 0 {
		for _, c := range node.Children {
			for _, p := range pieces(c.V, c.V+c.Size, wrap) {
				b.recv(b.real(c.V), p[0], sg(b.dst, b.real(p[0])*blk, (p[1]-p[0])*blk))
			}
		}
		if !b.spec.InPlace && b.n > 0 {
			b.copyOp(sg(b.dst, b.me*blk, blk), sg(b.src, 0, blk))
		}
		return nil
	}
	var sub *lbuf
	var err error
	if len(node.Children) > 0 {
		if sub, err = b.scratch((node.Size - 1) * blk); err != nil {
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
	for _, c := range node.Children {
		recvs = append(recvs, b.recv(b.real(c.V), c.V, sg(sub, (c.V-v-1)*blk, c.Size*blk)))
	}
	var splits []int
	if node.Parent == 0 {
		splits = []int{wrap}
	}
	for _, p := range pieces(v, v+node.Size, splits...) {
		s := b.send(b.real(node.Parent), p[0], local(p[0], p[1])...)
		b.after(s, recvs...)
	}
	return nil
}
