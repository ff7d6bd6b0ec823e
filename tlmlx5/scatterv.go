package tlmlx5

// scatterv: linear, with at most sendWindow writes in flight so that a large team
// does not flood the root's send queue.
func (b *builder) scatterv() error {
	s := b.spec
	if b.me != s.Root {
		b.recv(s.Root, b.me, sg(b.dst, 0, s.Dst.Bytes))
		return nil
	}
	c, d := s.Src.Counts, s.Src.Displs
	var sends []int32
	for i := 1; i < b.n; i++ {
		p := (b.me + i) % b.n
		o := b.send(p, p, sg(b.src, d[p]*b.dt, c[p]*b.dt))
		if len(sends) >= sendWindow {
			b.after(o, sends[len(sends)-sendWindow])
		}
		sends = append(sends, o)
	}
	if !s.InPlace {
		b.copyOp(sg(b.dst, 0, c[b.me]*b.dt), sg(b.src, d[b.me]*b.dt, c[b.me]*b.dt))
	}
	return nil
}
