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

// newCtlBlock makes one peer's receive slots (slots × slotSize bytes: 4 KiB past 16
// ranks, 8 KiB up to 16) when the peer is linked: registered host memory, never
// NIC device memory, although the context's pool may be device memory. Two facts of
// mlx5 decide it. Its library delivers a send of up to 32 bytes (64 with 128-byte
// CQEs) inside the completion and copies it into the receive buffer with the CPU
// while polling ("scatter to CQE", on by default for QPs made with ibv_create_qp); the
// address of a DM MR's receive buffer is an offset, not a pointer, so that copy would
// write below 64 KiB and kill the process (mlx5dv_create_qp(3): "When device memory is
// used IBV_SEND_INLINE and scatter to CQE should not be used"). And the CPU reads
// device memory through an uncached PCIe mapping, 4 bytes per read, where every
// control message is read here. Until session 43 the blocks were pool chunks where
// every rank's pool was device memory; rxe and soft0 have neither behaviour, so
// nothing here showed it.
func newCtlBlock(c *context, n int) (hostRegion, error) {
	return newHostRegion(c.pd, n, ctlAccess)
}

const ctlAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
