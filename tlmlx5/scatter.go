package tlmlx5

import (
	"github.com/ibcoll/ibcoll/internal/topo"
)

// scatterLinear is scatter with the root sending straight to every rank: the
// k-nomial tree of radix n.
func (b *builder) scatterLinear() error {
	b.radix = b.n
	return b.scatter()
}

// scatter: the mirror of gather. A non-root receives its own block into dst and its
// children's blocks into scratch, then forwards them.
func (b *builder) scatter() error {
	blk := b.spec.Block * b.dt
	v := b.v()
	node := topo.KNomial(b.n, v, b.radix)
	if v == 0 {
		for _, c := range node.Children {
			for _, p := range pieces(c.V, c.V+c.Size, c.V+1) {
				b.send(b.real(c.V), p[0], b.rootSegs(b.src, blk, p[0], p[1])...)
			}
		}
		if !b.spec.InPlace {
			b.copyOp(sg(b.dst, 0, blk), sg(b.src, b.me*blk, blk))
		}
		return nil
	}
	var sub *lbuf
	var err error
	if node.Size > 1 {
		if sub, err = b.scratch((node.Size - 1) * blk); err != nil {
			return err
		}
	}
	parts := pieces(v, v+node.Size, v+1)
	b.recv(b.real(node.Parent), v, sg(b.dst, 0, blk))
	if len(parts) > 1 {
		rest := b.recv(b.real(node.Parent), v+1, sg(sub, 0, (node.Size-1)*blk))
		for _, c := range node.Children {
			for _, p := range pieces(c.V, c.V+c.Size, c.V+1) {
				s := b.send(b.real(c.V), p[0], sg(sub, (p[0]-v-1)*blk, (p[1]-p[0])*blk))
				b.after(s, rest)
			}
		}
	}
	return nil
}
