package tlmlx5

import "github.com/ibcoll/ibcoll/internal/topo"

func (b *builder) allgatherRing() error {
	s := b.spec
	blk := s.Dst.Bytes / b.n
	own := sg(b.src, 0, blk)
	if s.InPlace {
		own = sg(b.dst, b.me*blk, blk)
	} else {
		b.copyOp(sg(b.dst, b.me*blk, blk), own)
	}
	left, right := topo.Ring(b.me, b.n)
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
	s := b.spec
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
