package tlmlx5

import (
	"fmt"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
)

// A reduction's source in NIC device memory, where the CPU reads that memory through
// uncached loads (verbs.DeviceAttr.DMUncachedReads; the reach lists DM in ReduceSrc):
// the task takes the source in place and copies it into host scratch at every post,
// as an operation of its own graph, and every operation that reads the source reads
// the scratch once that copy is done. The copy is a local copy like a gather root's
// own block (opCopy): one RDMA write on the team's loopback QP (loopback.go), or the
// pool's copy where the loopback cannot be made or failed. Without this, asym staged
// such a source before the post with ibv_memcpy_from_dm, uncached loads across PCIe
// a few bytes at a time. A destination in DM stays staged: the reduction writes it
// with the CPU, and the fold of a reduction reads what it wrote.

// srcIn makes the source of a reduction whose Src is in DM: it keeps the DM chunk in
// b.srcDM and returns host scratch of the same size, which the operations read and the
// loopback writes (scratch takes remote writes); addSrcIn adds the copy once the graph
// is built.
func (b *builder) srcIn(tb driver.Buf) (*lbuf, error) {
	d, err := b.dmChunkBuf("Src", tb)
	if err != nil {
		return nil, err
	}
	s, err := b.k.scratch(tb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: %v: host scratch for Args.Src in DM: %w", b.spec.Type, err)
	}
	b.srcDM = d
	return s, nil
}

// takesSrcIn reports whether buffer name of the collective is a reduction's source in
// DM that the task copies in itself.
func (b *builder) takesSrcIn(name string, tb driver.Buf) bool {
	return name == "Src" && tb.Type == mem.DM && b.spec.Type.IsReduction() && !b.spec.InPlace && b.t.c.copiesIn(mem.DM)
}

// addSrcIn adds the copy of the DM source into its scratch, and makes every operation
// that reads the scratch wait for it.
func (b *builder) addSrcIn() {
	if b.srcDM == nil {
		return
	}
	ci := b.copyOp(sg(b.src, 0, b.src.n), sg(b.srcDM, 0, b.srcDM.n))
	for i := range b.k.ops[:ci] {
		for _, s := range b.k.ops[i].reads() {
			if s.b == b.src && s.n > 0 {
				b.after(int32(i), ci)
				break
			}
		}
	}
}
