package tlmlx5

import (
	"fmt"

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

// ctlBlock holds the receive slots: in NIC device memory when the device has it (the
// mlx5 habit: control traffic then never crosses PCIe to host memory), else in host
// memory.
type ctlBlock struct {
	dm   *verbs.DM
	mr   *verbs.MR
	host hostRegion
	n    int
}

func newCtlBlock(c *context, n int) (ctlBlock, error) {
	if c.attr.MaxDMSize >= uint64(n) {
		if dm, err := c.dev.AllocDM(n); err == nil {
			mr, err := c.pd.RegDMMR(dm, 0, n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			if err == nil {
				return ctlBlock{dm: dm, mr: mr, n: n}, nil
			}
			_ = dm.Close()
		}
	}
	h, err := newHostRegion(c.pd, n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return ctlBlock{}, err
	}
	return ctlBlock{host: h, mr: h.mr, n: n}, nil
}

func (b *ctlBlock) read(dst []byte, off int) error {
	if b.dm != nil {
		return b.dm.CopyFrom(dst, off)
	}
	copy(dst, b.host.mem[off:])
	return nil
}

func (b *ctlBlock) close() error {
	if b.dm != nil {
		if b.mr != nil {
			if err := b.mr.Close(); err != nil {
				return err
			}
			b.mr = nil
		}
		if err := b.dm.Close(); err != nil {
			return err
		}
		b.dm = nil
		return nil
	}
	b.mr = nil
	return b.host.close()
}

// InDM reports whether the control block lives in device memory (for tests).
func (b *ctlBlock) InDM() bool { return b.dm != nil }
