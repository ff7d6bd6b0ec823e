package tlmlx5

// gatherv: linear; the root receives every rank's block straight into its place.
func (b *builder) gatherv() error {
	s := b.spec
	if b.me != s.Root {
		b.send(s.Root, b.me, sg(b.src, 0, s.Src.Bytes))
		return nil
	}
	c, d := s.Dst.Counts, s.Dst.Displs
	for p := 0; p < b.n; p++ {
		if p == b.me {
			if !s.InPlace {
				b.copyOp(sg(b.dst, d[p]*b.dt, c[p]*b.dt), sg(b.src, 0, c[p]*b.dt))
			}
			continue
		}
		b.recv(p, p, sg(b.dst, d[p]*b.dt, c[p]*b.dt))
	}
	return nil
}
