package tlmlx5

import (
	"errors"
	"fmt"

	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// hostRegion is registered host memory of the transport's own (mem's host memory:
// page-aligned, kept out of forked children).
type hostRegion struct {
	buf *mem.Buffer
	mem []byte
	mr  *verbs.MR
}

func newHostRegion(pd *verbs.PD, n int, access verbs.Access) (hostRegion, error) {
	b, err := mem.Alloc(mem.Host, n)
	if err != nil {
		return hostRegion{}, fmt.Errorf("tlmlx5: %d bytes of host memory: %w", n, err)
	}
	mr, err := pd.RegMRAddr(b.Addr(), n, access)
	if err != nil {
		return hostRegion{}, fmt.Errorf("tlmlx5: register %d bytes: %w", n, closeJoin(err, b))
	}
	return hostRegion{buf: b, mem: b.Bytes()[:n], mr: mr}, nil
}

func (h *hostRegion) close() error {
	if h.mr != nil {
		if err := h.mr.Close(); err != nil {
			return err
		}
		h.mr = nil
	}
	if h.buf != nil {
		if err := h.buf.Close(); err != nil {
			return err
		}
		h.buf, h.mem = nil, nil
	}
	return nil
}

func (h *hostRegion) addr(off int) uint64 { return h.mr.Addr() + uint64(off) }

// ctlBlock holds one peer's receive slots (slots × slotSize bytes: 4 KiB past 16
// ranks, 8 KiB up to 16), made when the peer is linked. It is a chunk of the context's
// pool, which is NIC device memory where the device gave the context some (the mlx5
// habit: control traffic then never crosses PCIe to host memory) and registered host
// memory otherwise; where the pool has no room left it is host memory of the team's
// own. Whether the pool's device memory is used at all is agreed at Connect: only if
// every rank's pool is device memory (the kind travels in the endpoint address), so
// that a team whose ranks differ (rxe beside an mlx5) is host memory throughout.
// Within a team a rank's first links take device memory and later ones host memory
// when the pool runs out (ctlKind says "dm+host"). Control blocks together take at most
// half the pool (ctlShare): device memory only makes control traffic a little faster,
// and the user's DM buffers (AllocDM) and DM scratch, which ask for it by name, must
// find room after the first collectives linked their peers.
type ctlBlock struct {
	chunk *dm.Chunk // from the context's pool
	c     *context  // the chunk's context, whose share it counts in
	host  hostRegion
	mr    *verbs.MR // the chunk's pool MR, or host's
	base  uint64    // the block's first address in mr
	n     int
}

const ctlAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite

// ctlShare is the part of a context's pool that its control blocks may hold together.
const ctlShare = 2 // one half

func newCtlBlock(c *context, n int) (ctlBlock, error) {
	if !c.takeCtlDM(n) {
		return hostCtlBlock(c, n)
	}
	ch, err := c.pool.AllocChunk(n)
	if err == nil {
		return ctlBlock{chunk: ch, c: c, mr: c.pool.MR(), base: ch.Addr(), n: n}, nil
	}
	c.giveCtlDM(n)
	if !errors.Is(err, dm.ErrExhausted) {
		return ctlBlock{}, fmt.Errorf("tlmlx5: control block: %w", err)
	}
	return hostCtlBlock(c, n)
}

// takeCtlDM counts n more bytes of control blocks in the pool, if the share allows.
func (c *context) takeCtlDM(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctlDM+n > c.pool.Capacity()/ctlShare {
		return false
	}
	c.ctlDM += n
	return true
}

func (c *context) giveCtlDM(n int) {
	c.mu.Lock()
	c.ctlDM -= n
	c.mu.Unlock()
}

func hostCtlBlock(c *context, n int) (ctlBlock, error) {
	h, err := newHostRegion(c.pd, n, ctlAccess)
	if err != nil {
		return ctlBlock{}, err
	}
	return ctlBlock{host: h, mr: h.mr, base: h.addr(0), n: n}, nil
}

// inDM reports whether the block lives in NIC device memory.
func (b *ctlBlock) inDM() bool { return b.chunk != nil && b.chunk.Pool().Kind() == dm.KindDM }

// kind names where the block lives, for the endpoint address and for logs.
func (b *ctlBlock) kind() string {
	if b.inDM() {
		return dm.KindDM
	}
	return dm.KindHost
}

func (b *ctlBlock) read(dst []byte, off int) error {
	if b.chunk != nil {
		return b.chunk.CopyFrom(dst, off)
	}
	copy(dst, b.host.mem[off:])
	return nil
}

func (b *ctlBlock) close() error {
	if b.chunk != nil {
		if err := b.chunk.Close(); err != nil {
			return err
		}
		b.c.giveCtlDM(b.n)
		b.chunk, b.c, b.mr = nil, nil, nil
		return nil
	}
	b.mr = nil
	return b.host.close()
}
