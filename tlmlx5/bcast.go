package tlmlx5

import "github.com/ibcoll/ibcoll/internal/topo"

func (b *builder) bcastKnomial() error {
	n := b.spec.Src.Bytes
	v := b.v()
	node := topo.KNomial(b.n, v, b.radix)
	var in int32 = -1
	if v != 0 {
		in = b.recv(b.real(node.Parent), v, sg(b.src, 0, n))
	}
	for _, c := range node.Children {
		s := b.send(b.real(c.V), c.V, sg(b.src, 0, n))
		b.after(s, in)
	}
	return nil
}

// chainChunkOf is the chain's chunk for a vector of n bytes: chainChunk, or larger so
// that there are at most maxChunks.
func chainChunkOf(n int) int { return max(chainChunk, (n+maxChunks-1)/maxChunks) }

// chainChunks is how many chunks the chain splits n bytes into.
func chainChunks(n int) int { return max(1, (n+chainChunkOf(n)-1)/chainChunkOf(n)) }

// bcastChain pipelines chunks down the chain of virtual ranks; each rank forwards a
// chunk as soon as it arrived, and asks for at most chainWindow chunks ahead.
func (b *builder) bcastChain() error {
	n := b.spec.Src.Bytes
	chunk := chainChunkOf(n)
	nch := chainChunks(n)
	v := b.v()
	var recvs []int32
	for i := 0; i < nch; i++ {
		off := i * chunk
		m := min(chunk, n-off)
		var in int32 = -1
		if v > 0 {
			in = b.recv(b.real(v-1), i, sg(b.src, off, m))
			if i >= chainWindow {
				b.after(in, recvs[i-chainWindow])
			}
			recvs = append(recvs, in)
		}
		if v < b.n-1 {
			s := b.send(b.real(v+1), i, sg(b.src, off, m))
			b.after(s, in)
		}
	}
	return nil
}

// bcastScatterAllgather splits the buffer into n chunks, one per virtual rank: the
// root writes chunk v straight to virtual rank v (tag v-1, at most sendWindow in
// flight), then a ring over virtual ranks passes the chunks around (tags n-1+step:
// 2n-2 tags in all, see tagsOf). The root only sends in the ring
// (it has every chunk), so its left neighbour skips the last hop. Each rank receives
// every byte once and sends it once, instead of the k-nomial's radix-1 sends of the
// whole buffer per level.
func (b *builder) bcastScatterAllgather() error {
	n := b.spec.Src.Bytes
	ch := chunks{count: n / b.dt, n: b.n, dt: b.dt}
	v := b.v()
	chunk := func(cv int) seg { return ch.seg(b.src, cv) } // chunk of virtual rank cv
	var have int32 = -1                                    // this rank's own chunk arrived
	if v == 0 {
		var sends []int32
		for cv := 1; cv < b.n; cv++ {
			o := b.send(b.real(cv), cv-1, chunk(cv))
			if len(sends) >= sendWindow {
				b.after(o, sends[len(sends)-sendWindow])
			}
			sends = append(sends, o)
		}
	} else {
		have = b.recv(b.root, v-1, chunk(v))
	}
	left, right := b.real(topo.Mod(v-1, b.n)), b.real(topo.Mod(v+1, b.n))
	prev := have
	for st := 0; st < b.n-1; st++ {
		if topo.Mod(v+1, b.n) != 0 {
			snd := b.send(right, b.n-1+st, chunk(topo.Mod(v-st, b.n)))
			b.after(snd, prev)
		}
		if v != 0 {
			prev = b.recv(left, b.n-1+st, chunk(topo.Mod(v-st-1, b.n)))
		}
	}
	return nil
}
