package tlmlx5

// alltoall: pairwise exchange, at most sendWindow writes in flight. In place, blocks
// arrive in scratch and move to dst once the block they replace has been sent.
func (b *builder) alltoall() error {
	s := b.spec
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
