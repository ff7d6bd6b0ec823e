package tlmlx5

import "github.com/ibcoll/ibcoll/internal/topo"

// allreduceRD is recursive doubling; a team that is not a power of two first folds
// its extra ranks into their neighbours and hands them the result at the end. The
// source is read where it lies: the first step sends it and reduces it with the
// partner's vector straight into dst, so no pass copies src into dst first (a third
// of a 2-rank allreduce's memory traffic).
func (b *builder) allreduceRD() error {
	s := b.spec
	n := s.Dst.Bytes
	acc := sg(b.dst, 0, n)
	// cur holds this rank's running result: its source until a reduction writes acc
	// (in place the two are one buffer).
	cur := acc
	if !s.InPlace {
		cur = sg(b.src, 0, n)
	}
	var last int32 = -1
	// reduceInto reduces cur with tmp into acc once r has landed; while cur is still
	// the source, the reduction need not wait for the send that reads it.
	reduceInto := func(tmp seg, r, snd int32) {
		red := b.reduceOp(acc, cur, tmp)
		b.after(red, r, last)
		if cur == acc {
			b.after(red, snd)
		}
		last, cur = red, acc
	}
	fold := topo.NewFold(b.n)
	p2, rem := fold.P2, fold.Extra
	const foldTag, unfoldTag = 0, 63
	nv := -1
	switch {
	case b.me < 2*rem && b.me%2 == 0:
		snd := b.send(b.me+1, foldTag, cur)
		r := b.recv(b.me+1, unfoldTag, acc)
		b.after(r, snd)
		return nil
	case b.me < 2*rem:
		tmp, err := b.scratch(n)
		if err != nil {
			return err
		}
		r := b.recv(b.me-1, foldTag, sg(tmp, 0, n))
		reduceInto(sg(tmp, 0, n), r, -1)
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
		snd := b.send(partner, 1+st, cur)
		b.after(snd, last)
		r := b.recv(partner, 1+st, sg(tmp, 0, n))
		reduceInto(sg(tmp, 0, n), r, snd)
	}
	if cur != acc {
		// A team of one: nothing was reduced.
		last = b.copyOp(acc, cur)
	}
	last = b.finalIfAvg(acc, last)
	if b.me < 2*rem {
		snd := b.send(b.me-1, unfoldTag, acc)
		b.after(snd, last)
	}
	return nil
}

// allreduceRing is a reduce-scatter ring then an allgather ring over n chunks. Each
// chunk is reduced once in the first ring, into dst where it was received, and the
// chunk a rank never reduces (its own, sent from the source at the first step) is
// overwritten by the second ring: no pass copies src into dst.
func (b *builder) allreduceRing() error {
	s := b.spec
	if b.n == 1 {
		return b.allreduceRD()
	}
	n := s.Dst.Bytes
	ch := chunks{count: n / b.dt, n: b.n, dt: b.dt}
	chunkOff := ch.chunk
	acc := func(i int) seg { return ch.seg(b.dst, i) }
	in := acc
	if !s.InPlace {
		in = func(i int) seg { return ch.seg(b.src, i) }
	}
	maxLen := ch.max()
	var tmp *lbuf
	if s.InPlace {
		var err error
		if tmp, err = b.scratch((b.n - 1) * maxLen); err != nil {
			return err
		}
	}
	left, right := topo.Ring(b.me, b.n)
	mod := func(x int) int { return topo.Mod(x, b.n) }
	rsSend := make([]int32, b.n-1)
	var last int32 = -1
	for st := 0; st < b.n-1; st++ {
		sc, rc := mod(b.me-st), mod(b.me-st-1)
		// Step 0 sends this rank's own chunk of the source; every later step the
		// chunk the step before reduced.
		out := acc(sc)
		if st == 0 {
			out = in(sc)
		}
		snd := b.send(right, st, out)
		b.after(snd, last)
		rsSend[st] = snd
		var r, red int32
		if s.InPlace {
			_, l := chunkOff(rc)
			r = b.recv(left, st, sg(tmp, st*maxLen, l))
			red = b.reduceOp(acc(rc), acc(rc), sg(tmp, st*maxLen, l))
		} else {
			// The left neighbour's partial result lands in dst itself, and this
			// rank's chunk of the source is folded into it there: two inputs,
			// one of them the output, and no scratch (a third less memory
			// traffic than out = src + scratch). Every chunk is reduced in one
			// order around the ring, so every rank still gets the same bits.
			r = b.recv(left, st, acc(rc))
			red = b.reduceOp(acc(rc), acc(rc), in(rc))
		}
		b.after(red, r)
		last = red
	}
	last = b.finalIfAvg(acc(mod(b.me+1)), last)
	for st := 0; st < b.n-1; st++ {
		sc, rc := mod(b.me+1-st), mod(b.me-st)
		snd := b.send(right, b.n-1+st, acc(sc))
		b.after(snd, last)
		r := b.recv(left, b.n-1+st, acc(rc))
		if st > 0 || s.InPlace {
			// The chunk lands where the first ring's send of this step read it.
			// At step 0 that send read the source instead (not in place), so the
			// ready-to-receive goes at once, and the left neighbour may forward
			// each piece as it reduces it (forwardReduced).
			b.after(r, rsSend[st])
		}
		last = r
	}
	return nil
}
