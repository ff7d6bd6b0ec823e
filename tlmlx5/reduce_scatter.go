package tlmlx5

import "github.com/ibcoll/ibcoll/internal/topo"

// reduceScatterRing: rank r ends with block r of the reduction. At step st a rank
// sends to its right the partial sum of block me-st-1 (its own input for st = 0, else
// what it reduced at step st-1) and receives from its left the partial sum of block
// me-st-2, which it combines with its own input; after n-1 steps the partial sum it
// holds is block me, complete.
func (b *builder) reduceScatterRing() error {
	in := b.src
	if b.spec.InPlace {
		in = b.dst
	}
	blk := b.spec.Block * b.dt
	ch := func(i int) seg { return sg(in, topo.Mod(i, b.n)*blk, blk) }
	out := sg(b.dst, 0, blk)
	if b.spec.InPlace {
		out = ch(b.me)
	}
	_, err := b.ringReduceScatter(ch, func(int) int { return blk }, out)
	return err
}

// ringReduceScatter runs the reduce-scatter ring over n chunks of the input (chunk(i)
// is chunk i, size(i) its length): this rank's chunk me, complete, lands in out. It
// returns the operation that completes out, and the reductions that read each input
// chunk (by chunk index), so that a caller may order writes into the input after them.
func (b *builder) ringReduceScatter(chunk func(int) seg, size func(int) int, out seg) (int32, error) {
	if b.n == 1 {
		var done int32 = -1
		if out.b != chunk(0).b || out.off != chunk(0).off {
			done = b.copyOp(out, chunk(0))
		}
		return b.finalIfAvg(out, done), nil
	}
	left, right := topo.Ring(b.me, b.n)
	maxLen := 0
	for i := 0; i < b.n; i++ {
		maxLen = max(maxLen, size(i))
	}
	tmp, err := b.scratch((b.n - 1) * maxLen)
	if err != nil {
		return -1, err
	}
	var red int32 = -1
	partial := chunk(b.me - 1)
	for st := 0; st < b.n-1; st++ {
		snd := b.send(right, st, partial)
		b.after(snd, red)
		c := topo.Mod(b.me-st-2, b.n)
		got := sg(tmp, st*maxLen, size(c))
		rcv := b.recv(left, st, got)
		if st == b.n-2 {
			red = b.reduceOp(out, chunk(c), got)
		} else {
			red = b.reduceOp(got, got, chunk(c))
		}
		b.after(red, rcv)
		partial = got
	}
	return b.finalIfAvg(out, red), nil
}

// reduceScatterRH is recursive halving (a power-of-two team): at distance d = n/2,
// n/4, ..., 1 a rank keeps the half of its current range of blocks that holds its own
// block, sends the other half to its partner (rank xor d) and adds the partner's copy
// of its half.
func (b *builder) reduceScatterRH() error {
	s := b.spec
	blk := s.Block * b.dt
	if b.n == 1 {
		return b.reduceScatterRing()
	}
	// The halves are reduced in scratch, so that an in-place Dst keeps every block
	// but this rank's as it was.
	in := b.src
	if s.InPlace {
		in = b.dst
	}
	acc, err := b.scratch(b.n * blk)
	if err != nil {
		return err
	}
	last := b.copyOp(sg(acc, 0, b.n*blk), sg(in, 0, b.n*blk))
	lo := 0 // the current range of blocks is [lo, lo+2d)
	for st, d := 0, b.n/2; d >= 1; st, d = st+1, d/2 {
		partner := b.me ^ d
		keep, give := lo, lo+d
		if b.me&d != 0 {
			keep, give = lo+d, lo
		}
		tmp, err := b.scratch(d * blk)
		if err != nil {
			return err
		}
		snd := b.send(partner, st, sg(acc, give*blk, d*blk))
		b.after(snd, last)
		rcv := b.recv(partner, st, sg(tmp, 0, d*blk))
		red := b.reduceOp(sg(acc, keep*blk, d*blk), sg(acc, keep*blk, d*blk), sg(tmp, 0, d*blk))
		b.after(red, rcv, last)
		last = red
		lo = keep
	}
	out := sg(b.dst, 0, blk)
	if s.InPlace {
		out = sg(b.dst, b.me*blk, blk)
	}
	c := b.copyOp(out, sg(acc, b.me*blk, blk))
	b.after(c, last)
	b.finalIfAvg(out, c)
	return nil
}
