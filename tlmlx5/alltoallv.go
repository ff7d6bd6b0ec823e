package tlmlx5

// alltoallv: pairwise exchange, like alltoall's, with per-rank counts and
// displacements, at most sendWindow writes in flight. In place (as MPI's), Dst's
// layout says both what goes to each rank and what comes from it; blocks arrive in
// scratch and move to Dst once the block they replace has been sent.
func (b *builder) alltoallv() error {
	s := b.spec
	rc, rd := s.Dst.Counts, s.Dst.Displs
	sc, sd, src := s.Src.Counts, s.Src.Displs, b.src
	if s.InPlace {
		sc, sd, src = rc, rd, b.dst
	}
	out := func(r int) seg { return sg(src, sd[r]*b.dt, sc[r]*b.dt) }
	in := func(r int) seg { return sg(b.dst, rd[r]*b.dt, rc[r]*b.dt) }
	if sc[b.me] != rc[b.me] {
		return b.mismatch("Src.Counts[%d] is %d, Dst.Counts[%d] is %d", b.me, sc[b.me], b.me, rc[b.me])
	}
	if !s.InPlace {
		b.copyOp(in(b.me), out(b.me))
	}
	var tmp *lbuf
	tmpOff := make([]int, b.n)
	if s.InPlace && b.n > 1 {
		total := 0
		for r := range b.n {
			tmpOff[r] = total
			if r != b.me {
				total += rc[r] * b.dt
			}
		}
		var err error
		if tmp, err = b.scratch(total); err != nil {
			return err
		}
	}
	sends := make([]int32, b.n)
	recvs := make([]int32, b.n)
	for st := 1; st < b.n; st++ {
		to, from := (b.me+st)%b.n, (b.me-st+b.n)%b.n
		sends[st] = b.send(to, st, out(to))
		if st > sendWindow {
			b.after(sends[st], sends[st-sendWindow])
		}
		into := in(from)
		if tmp != nil {
			into = sg(tmp, tmpOff[from], rc[from]*b.dt)
		}
		recvs[st] = b.recv(from, st, into)
	}
	if tmp != nil {
		for st := 1; st < b.n; st++ {
			from := (b.me - st + b.n) % b.n
			c := b.copyOp(in(from), sg(tmp, tmpOff[from], rc[from]*b.dt))
			b.after(c, recvs[st], sends[b.n-st])
		}
	}
	return nil
}
