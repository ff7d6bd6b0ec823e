package verbs

import (
	"runtime"
	"unsafe"
)

// MR is a registered memory region. Its keys and address are fixed at
// registration, so reading them needs no lock.
type MR struct {
	node
	pd     *PD
	dm     *DM
	b      mrBackend
	addr   uint64
	length int
	lkey   uint32
	rkey   uint32
	access Access
	pin    runtime.Pinner
	pinned bool
	// device: a DM or dma-buf MR, whose key the PD lists as device memory
	// (devkeys.go)
	device bool
}

// RegMR wraps ibv_reg_mr(3) for a Go slice. The slice is pinned while the
// MR lives, so the garbage collector cannot move or free it under the NIC.
func (p *PD) RegMR(buf []byte, access Access) (*MR, error) {
	if p == nil {
		return nil, invalid("RegMR", "nil PD")
	}
	if buf == nil {
		return nil, invalid("RegMR", "buf is nil")
	}
	if len(buf) == 0 {
		return nil, invalid("RegMR", "buf is empty")
	}
	mr, err := p.regMR("RegMR", uintptr(unsafe.Pointer(&buf[0])), len(buf), access)
	if err != nil {
		return nil, err
	}
	mr.pin.Pin(&buf[0])
	mr.pinned = true
	return mr, nil
}

// RegMRAddr wraps ibv_reg_mr(3) for memory Go does not own (mmap, C
// allocations, device pointers). The caller keeps it valid while the MR
// lives.
func (p *PD) RegMRAddr(addr uintptr, length int, access Access) (*MR, error) {
	if p == nil {
		return nil, invalid("RegMRAddr", "nil PD")
	}
	if addr == 0 {
		return nil, invalid("RegMRAddr", "addr is 0")
	}
	if length <= 0 {
		return nil, invalid("RegMRAddr", "length must be > 0, got %d", length)
	}
	if addr+uintptr(length) < addr {
		return nil, invalid("RegMRAddr", "addr %#x + length %d wraps past the end of the address space", addr, length)
	}
	return p.regMR("RegMRAddr", addr, length, access)
}

func (p *PD) regMR(op string, addr uintptr, length int, access Access) (*MR, error) {
	if err := access.validate(); err != nil {
		return nil, invalid(op, "%v", err)
	}
	if err := p.reserve(op, "PD"); err != nil {
		return nil, err
	}
	b, err := p.b.regMR(addr, length, access)
	if err != nil {
		p.dropChild()
		return nil, err
	}
	mr := &MR{pd: p, b: b, addr: uint64(addr), length: length, lkey: b.lkey(), rkey: b.rkey(), access: access}
	mr.register("mr", 1) // called by RegMR and RegMRAddr
	return mr, nil
}

// RegDMMR wraps ibv_reg_dm_mr(3) with IBV_ACCESS_ZERO_BASED: the MR's
// addresses are offsets into the DM region, starting at offset.
func (p *PD) RegDMMR(dm *DM, offset, length int, access Access) (*MR, error) {
	const op = "RegDMMR"
	if p == nil {
		return nil, invalid(op, "nil PD")
	}
	if dm == nil {
		return nil, invalid(op, "dm is nil")
	}
	if offset < 0 || length <= 0 || offset > dm.size || length > dm.size-offset {
		return nil, invalid(op, "offset %d length %d outside the %d-byte DM", offset, length, dm.size)
	}
	if err := access.validate(); err != nil {
		return nil, invalid(op, "%v", err)
	}
	if dm.ctx != p.ctx {
		return nil, invalid(op, "dm and PD belong to different contexts")
	}
	if err := p.reserve(op, "PD"); err != nil {
		return nil, err
	}
	if err := dm.reserve(op, "DM"); err != nil {
		p.dropChild()
		return nil, err
	}
	b, err := p.b.regDMMR(dm.b, offset, length, access)
	if err != nil {
		dm.dropChild()
		p.dropChild()
		return nil, err
	}
	mr := &MR{pd: p, dm: dm, b: b, addr: 0, length: length, lkey: b.lkey(), rkey: b.rkey(), access: access, device: true}
	mr.register("mr", 0)
	p.dev.add(mr.lkey)
	return mr, nil
}

// RegDMABufMR wraps ibv_reg_dmabuf_mr(3): it registers length bytes at offset
// of the dma-buf fd (exported by a GPU driver, for one), addressed by peers
// from iova. The caller may close fd once this returns; the MR keeps its own
// reference. RegMR falls back to this path by itself for CUDA device memory
// that ibv_reg_mr refuses. Providers without dma-buf import fail with
// ErrNotSupported.
func (p *PD) RegDMABufMR(fd, offset, length int, iova uint64, access Access) (*MR, error) {
	const op = "RegDMABufMR"
	if p == nil {
		return nil, invalid(op, "nil PD")
	}
	if fd < 0 {
		return nil, invalid(op, "fd must be >= 0, got %d", fd)
	}
	if offset < 0 {
		return nil, invalid(op, "offset must be >= 0, got %d", offset)
	}
	if length <= 0 {
		return nil, invalid(op, "length must be > 0, got %d", length)
	}
	if iova > ^uint64(0)-uint64(length) {
		return nil, invalid(op, "iova %#x + length %d overflows", iova, length)
	}
	if err := access.validate(); err != nil {
		return nil, invalid(op, "%v", err)
	}
	if err := p.reserve(op, "PD"); err != nil {
		return nil, err
	}
	b, err := p.b.regDMABufMR(fd, offset, length, iova, access)
	if err != nil {
		p.dropChild()
		return nil, err
	}
	mr := &MR{pd: p, b: b, addr: iova, length: length, lkey: b.lkey(), rkey: b.rkey(), access: access, device: true}
	mr.register("mr", 0)
	p.dev.add(mr.lkey)
	return mr, nil
}

// Via names how the region was registered: "ibv_reg_mr" (host memory, or
// device memory through a peer-memory module), "ibv_reg_dmabuf_mr",
// "ibv_reg_dm_mr", "soft0", "soft0 GPUDirect stand-in", or soft0 with the
// non-temporal writes it makes into the region and why.
func (m *MR) Via() string {
	if m == nil || m.b == nil {
		return ""
	}
	return m.b.via()
}

// LKey is the local key, for SGEs.
func (m *MR) LKey() uint32 {
	if m == nil {
		return 0
	}
	return m.lkey
}

// RKey is the remote key, for peers' RDMA requests.
func (m *MR) RKey() uint32 {
	if m == nil {
		return 0
	}
	return m.rkey
}

// Addr is the first address of the region: its virtual address, or 0 for
// a zero-based DM MR.
func (m *MR) Addr() uint64 {
	if m == nil {
		return 0
	}
	return m.addr
}

// Len is the length of the region in bytes.
func (m *MR) Len() int {
	if m == nil {
		return 0
	}
	return m.length
}

// Access returns the access flags the region was registered with.
func (m *MR) Access() Access {
	if m == nil {
		return 0
	}
	return m.access
}

// Close wraps ibv_dereg_mr(3) and unpins the Go memory behind the MR.
func (m *MR) Close() error {
	if m == nil {
		return nil
	}
	if done, err := m.beginClose("MR.Close", "MR"); done {
		return err
	}
	if err := m.b.close(); err != nil {
		m.endClose(false)
		return err
	}
	m.endClose(true)
	if m.pinned {
		m.pin.Unpin()
		m.pinned = false
	}
	if m.device {
		m.pd.dev.remove(m.lkey)
	}
	m.pd.dropChild()
	if m.dm != nil {
		m.dm.dropChild()
	}
	m.unregister()
	return nil
}
