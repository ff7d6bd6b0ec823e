package tlmlx5

import "github.com/ibcoll/ibcoll/internal/topo"

// allgatherv: a ring, like allgather's, with each rank's block at its own count and
// displacement of Dst. At step st a rank forwards to its right the block of rank
// me-st (its own at st = 0) and receives from its left the block of rank me-st-1.
func (b *builder) allgatherv() error {
	s := b.spec
	c, d := s.Dst.Counts, s.Dst.Displs
	block := func(r int) seg { return sg(b.dst, d[r]*b.dt, c[r]*b.dt) }
	own := block(b.me)
	if !s.InPlace {
		own = sg(b.src, 0, c[b.me]*b.dt) // coll checked that Src.Count is Dst.Counts[me]
		b.copyOp(block(b.me), own)
	}
	left, right := topo.Ring(b.me, b.n)
	var prev int32 = -1
	for st := 0; st < b.n-1; st++ {
		data := block(topo.Mod(b.me-st, b.n))
		if st == 0 {
			data = own
		}
		snd := b.send(right, st, data)
		b.after(snd, prev)
		prev = b.recv(left, st, block(topo.Mod(b.me-st-1, b.n)))
	}
	return nil
}
