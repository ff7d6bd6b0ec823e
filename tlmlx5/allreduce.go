package tlmlx5

import "github.com/ibcoll/ibcoll/internal/topo"

// allreduceRD is recursive doubling; a team that is not a power of two first folds
// its extra ranks into their neighbours and hands them the result at the end.
func (b *builder) allreduceRD() error {
	s := b.spec
	n := s.Dst.Bytes
	acc := sg(b.dst, 0, n)
	var last int32 = -1
	if !s.InPlace {
		last = b.copyOp(acc, sg(b.src, 0, n))
	}
	fold := topo.NewFold(b.n)
	p2, rem := fold.P2, fold.Extra
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
	realOf := fold.Real
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
	last = b.finalIfAvg(acc, last)
	if b.me < 2*rem {
		snd := b.send(b.me-1, unfoldTag, acc)
		b.after(snd, last)
	}
	return nil
}

// allreduceRing is a reduce-scatter ring then an allgather ring over n chunks.
func (b *builder) allreduceRing() error {
	s := b.spec
	if b.n == 1 {
		return b.allreduceRD()
	}
	n := s.Dst.Bytes
	ch := chunks{count: n / b.dt, n: b.n, dt: b.dt}
	chunkOff := ch.chunk
	acc := func(i int) seg { return ch.seg(b.dst, i) }
	var init int32 = -1
	if !s.InPlace {
		init = b.copyOp(sg(b.dst, 0, n), sg(b.src, 0, n))
	}
	maxLen := ch.max()
	tmp, err := b.scratch((b.n - 1) * maxLen)
	if err != nil {
		return err
	}
	left, right := topo.Ring(b.me, b.n)
	mod := func(x int) int { return topo.Mod(x, b.n) }
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
		// After the copy of src into dst too: the copy may wait for a staged source
		// while the left neighbour's chunk has already arrived.
		b.after(red, r, init)
		last = red
	}
	last = b.finalIfAvg(acc(mod(b.me+1)), last)
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
