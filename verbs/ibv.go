//go:build cgo

package verbs

// The ibv provider: the exported types (context.go, pd.go, ...) over the
// real libibverbs (mlx5, rxe, ...). They have already checked arguments
// and lifecycle when a method here runs, so these methods only translate
// between Go and C and map return codes to errors. C pointers never leave
// this provider, and no Go pointer is kept by C past a call.

/*
#cgo CFLAGS: -I${SRCDIR}/../cgo
#cgo LDFLAGS: -libverbs -ldl
#include <stdlib.h>
#include "verbs_shim.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/mem"
)

func init() { ibvProvider = ibvProv{} }

type ibvProv struct{}

func (ibvProv) name() string { return "ibv" }

// errnoOf extracts the errno cgo captured with a call that failed. A
// provider that failed without setting errno gets fallback, so that every
// failure maps to some errno.
func errnoOf(err error, fallback unix.Errno) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return fallback
}

// rcErrno maps the return code of an rc-returning verb to an errno:
// libibverbs returns a positive errno, but some providers return -1 with
// errno set (captured by cgo in err) or a negative errno.
func rcErrno(rc C.int, err error) unix.Errno {
	switch {
	case rc > 0:
		return unix.Errno(rc)
	case rc == -1:
		return errnoOf(err, unix.EPERM)
	}
	return unix.Errno(-rc)
}

// beToHost converts a __be64 as cgo reads it (its bytes in network order,
// loaded as a native integer) to a host integer.
func beToHost(v C.__be64) uint64 {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(v))
	return binary.BigEndian.Uint64(b[:])
}

// deviceList wraps ibv_get_device_list(3). On a host whose kernel has no
// RDMA support it fails with ENOSYS: that is a host with no devices.
func deviceList() (list **C.struct_ibv_device, devs []*C.struct_ibv_device, err error) {
	var n C.int
	list, err = C.ibv_get_device_list(&n)
	if list == nil {
		errno := errnoOf(err, unix.ENODEV)
		if errno == unix.ENOSYS || errno == unix.ENODEV || errno == unix.ENOENT {
			return nil, nil, nil
		}
		return nil, nil, errnoError("Devices", errno, "ibv_get_device_list")
	}
	return list, unsafe.Slice(list, int(n)), nil
}

func (ibvProv) devices(sysfs fs.FS) ([]DeviceInfo, error) {
	list, devs, err := deviceList()
	if err != nil || list == nil {
		return nil, err
	}
	defer C.ibv_free_device_list(list)
	out := make([]DeviceInfo, 0, len(devs))
	for _, dev := range devs {
		name := C.GoString(C.ibv_get_device_name(dev))
		info := baseInfo(sysfs, name, dev)
		// A device that cannot be opened (no permission on its uverbs
		// node) is still listed, with what sysfs says about its ports.
		ctx, _ := C.ibv_open_device(dev)
		slots := 0
		if ctx != nil {
			info.Ports, slots = queryPorts(ctx, info.Ports)
		}
		_ = fillGIDs(sysfs, &info, ctx, slots)
		if ctx != nil {
			C.ibv_close_device(ctx)
		}
		out = append(out, info)
	}
	return out, nil
}

// baseInfo describes a device from sysfs and its libibverbs GUID, before
// it is opened, without GID tables (fillGIDs).
func baseInfo(sysfs fs.FS, name string, dev *C.struct_ibv_device) DeviceInfo {
	sd, err := readSysfsDeviceGIDs(sysfs, name, false)
	if err != nil {
		sd = sysfsDevice{Name: name, NUMANode: -1}
	}
	info := sd.info()
	info.NodeGUID = beToHost(C.ibv_get_device_guid(dev))
	return info
}

// fillGIDs gives info's ports their GID tables, from the open device ctx in one
// call where libibverbs and the kernel can (gidTable; slots is the ports' table
// size that queryPorts summed), else from sysfs (also where ctx is nil: a device
// this process may not open); and names the device's netdev from them where sysfs
// named none. It reports whether they came from libibverbs.
func fillGIDs(sysfs fs.FS, info *DeviceInfo, ctx *C.struct_ibv_context, slots int) bool {
	var tab map[int][]GIDEntry
	ok := false
	if ctx != nil {
		tab, ok = gidTable(ctx, info.Ports, slots)
	}
	for i := range info.Ports {
		p := &info.Ports[i]
		if ok {
			p.GIDs = tab[p.Num]
		} else {
			p.GIDs = readSysfsGIDs(sysfs, sysfsPortDir(info.Name, p.Num), p.LinkLayer)
		}
	}
	if info.Netdev == "" {
		info.Netdev = gidNetdev(info.Ports)
	}
	return ok
}

// hasGIDTable reports whether this process's libibverbs has the GID table query.
func hasGIDTable() bool { return C.ibcoll_has_gid_table() != 0 }

// gidTable reads the valid entries of every port's GID table of ctx, by port
// (_ibv_query_gid_table through the shim), into at most slots entries. ok is false
// where libibverbs or the kernel cannot, or the device reports no table.
func gidTable(ctx *C.struct_ibv_context, ports []PortInfo, slots int) (map[int][]GIDEntry, bool) {
	if slots <= 0 {
		return nil, false
	}
	eth := map[int]bool{}
	for _, p := range ports {
		eth[p.Num] = p.LinkLayer == LinkLayerEthernet
	}
	ents, okc := cAlloc[C.struct_ibcoll_gid_entry](slots)
	if !okc {
		return nil, false
	}
	defer cFree(ents)
	got := int(C.ibcoll_query_gid_table(ctx, &ents[0], C.size_t(slots)))
	if got < 0 || got > slots {
		return nil, false
	}
	tab := map[int][]GIDEntry{}
	names := map[uint32]string{}
	for _, e := range ents[:got] {
		var g GID
		for i := range g {
			g[i] = byte(e.gid[i])
		}
		if g.IsZero() {
			continue
		}
		ent := GIDEntry{Index: int(e.gid_index), GID: g}
		switch e.gid_type {
		case 1:
			ent.Type = GIDTypeRoCEv1
		case 2:
			ent.Type = GIDTypeRoCEv2
		default:
			// Type 0 on an Ethernet port is RoCE v1, as sysfs's "IB/RoCE v1" is.
			ent.Type = GIDTypeIB
			if eth[int(e.port_num)] {
				ent.Type = GIDTypeRoCEv1
			}
		}
		if ix := uint32(e.ndev_ifindex); ix != 0 {
			nd, seen := names[ix]
			if !seen {
				var buf [C.IF_NAMESIZE]C.char
				if C.ibcoll_ifname(C.uint32_t(ix), &buf[0]) != 0 {
					nd = C.GoString(&buf[0])
				}
				names[ix] = nd
			}
			ent.Netdev = nd
		}
		tab[int(e.port_num)] = append(tab[int(e.port_num)], ent)
	}
	for _, g := range tab {
		sort.Slice(g, func(i, j int) bool { return g[i].Index < g[j].Index })
	}
	return tab, true
}

// queryPorts overlays ibv_query_port's view of every port on the sysfs
// one, which has no MTU. slots sums the ports' GID table sizes; 0 where a
// query failed.
func queryPorts(ctx *C.struct_ibv_context, sys []PortInfo) (ports []PortInfo, slots int) {
	var da C.struct_ibv_device_attr
	if C.ibv_query_device(ctx, &da) != 0 {
		return sys, 0
	}
	failed := false
	ports = make([]PortInfo, 0, int(da.phys_port_cnt))
	for n := 1; n <= int(da.phys_port_cnt); n++ {
		p := PortInfo{Num: n}
		for _, s := range sys {
			if s.Num == n {
				p = s
			}
		}
		var pa C.struct_ibv_port_attr
		if C.ibcoll_query_port(ctx, C.uint8_t(n), &pa) == 0 {
			p.State = PortState(pa.state)
			p.LinkLayer = LinkLayer(pa.link_layer)
			p.LID = uint16(pa.lid)
			p.ActiveMTU = mtuBytes(int(pa.active_mtu))
			slots += int(pa.gid_tbl_len)
		} else {
			failed = true
		}
		ports = append(ports, p)
	}
	if failed {
		slots = 0
	}
	return ports, slots
}

func (ibvProv) open(name string, o Options) (ctxBackend, DeviceInfo, error) {
	list, devs, err := deviceList()
	if err != nil {
		return nil, DeviceInfo{}, err
	}
	if list != nil {
		defer C.ibv_free_device_list(list)
	}
	var names []string
	for _, dev := range devs {
		n := C.GoString(C.ibv_get_device_name(dev))
		if n != name {
			names = append(names, n)
			continue
		}
		info := baseInfo(sysfs, name, dev)
		ctx, err := C.ibv_open_device(dev)
		if ctx == nil {
			return nil, DeviceInfo{}, errnoError("Open", errnoOf(err, unix.ENODEV), "ibv_open_device "+name)
		}
		c := &ibvContext{ctx: ctx, name: name}
		if err := c.init(&info, o); err != nil {
			C.ibv_close_device(ctx)
			return nil, DeviceInfo{}, err
		}
		return c, info, nil
	}
	have := "none"
	if len(names) > 0 {
		have = strings.Join(names, ", ")
	}
	return nil, DeviceInfo{}, newError("Open", ErrNoDevice,
		fmt.Sprintf("device %q not found (libibverbs devices: %s; %s always exists)", name, have, SoftDeviceName))
}

// ibvContext is an open device. The port and source GID that its QPs use
// are chosen once, at open, from the device's own view.
type ibvContext struct {
	ctx  *C.struct_ibv_context
	name string

	attr          DeviceAttr
	maxInitRdAtom int // max_qp_init_rd_atom: reads/atomics a QP may issue
	port          int
	ll            LinkLayer
	gidIndex      int
	gids          []GIDEntry
	// gidsQueried: the GID tables came from libibverbs (gidTable), not sysfs.
	gidsQueried bool
	// The path of its QPs (Options).
	trafficClass, serviceLevel, pkeyIndex int
}

// init queries the device and picks the port (the first active one, else
// port 1) and its source GID.
func (c *ibvContext) init(info *DeviceInfo, o Options) error {
	attr, initRdAtom, err := c.queryEx()
	if err != nil {
		return err
	}
	c.attr, c.maxInitRdAtom = attr, initRdAtom
	var slots int
	info.Ports, slots = queryPorts(c.ctx, info.Ports)
	c.gidsQueried = fillGIDs(sysfs, info, c.ctx, slots)
	if info.NodeGUID == 0 {
		info.NodeGUID = attr.NodeGUID
	}
	c.port = 1
	for _, p := range info.Ports {
		if p.State == PortActive {
			c.port = p.Num
			break
		}
	}
	for _, p := range info.Ports {
		if p.Num == c.port {
			c.ll = p.LinkLayer
			c.gids = p.GIDs
		}
	}
	if err := c.nonBlockingEvents(); err != nil {
		return err
	}
	c.gidIndex = chooseGIDIndex(c.ll, c.gids, o.GIDIndex)
	c.trafficClass, c.serviceLevel, c.pkeyIndex = o.TrafficClass, o.ServiceLevel, o.PKeyIndex
	var pa C.struct_ibv_port_attr
	if rc := C.ibcoll_query_port(c.ctx, C.uint8_t(c.port), &pa); rc != 0 {
		return errnoError("Open", unix.Errno(rc), fmt.Sprintf("ibv_query_port %s port %d", c.name, c.port))
	}
	if o.PKeyIndex >= int(pa.pkey_tbl_len) {
		return invalid("Open", "partition key index %d (Options.PKeyIndex; coll.Config.PKeyIndex, $%s): %s port %d has %d partition keys", o.PKeyIndex, PKeyIndexEnv, c.name, c.port, int(pa.pkey_tbl_len))
	}
	return nil
}

// query wraps ibv_query_device_ex(3) (ibv_query_device(3) where the
// provider lacks it) and ibv_query_port(3) for every port.
func (c *ibvContext) query() (DeviceAttr, error) {
	attr, _, err := c.queryEx()
	return attr, err
}

func (c *ibvContext) queryEx() (DeviceAttr, int, error) {
	var ax C.struct_ibv_device_attr_ex
	if rc := C.ibcoll_query_device_ex(c.ctx, &ax); rc != 0 {
		return DeviceAttr{}, 0, errnoError("Query", unix.Errno(rc), "ibv_query_device_ex "+c.name)
	}
	a := &ax.orig_attr
	attr := DeviceAttr{
		Name:         c.name,
		Provider:     "ibv",
		FWVer:        C.GoString(&a.fw_ver[0]),
		NodeGUID:     beToHost(a.node_guid),
		SysImageGUID: beToHost(a.sys_image_guid),
		VendorID:     uint32(a.vendor_id),
		VendorPartID: uint32(a.vendor_part_id),
		MaxMRSize:    uint64(a.max_mr_size),
		MaxQP:        int(a.max_qp),
		MaxQPWR:      int(a.max_qp_wr),
		MaxSGE:       int(a.max_sge),
		MaxCQ:        int(a.max_cq),
		MaxCQE:       int(a.max_cqe),
		MaxMR:        int(a.max_mr),
		MaxPD:        int(a.max_pd),
		MaxQPRdAtom:  int(a.max_qp_rd_atom),
		AtomicCap:    a.atomic_cap != C.IBV_ATOMIC_NONE,
		MaxDMSize:    uint64(ax.max_dm_size),
		// A device's memory sits behind its BAR: ibv_memcpy_from_dm is a loop of
		// uncached loads (mlx5), whatever the device.
		DMUncachedReads: ax.max_dm_size > 0,
	}
	for n := 1; n <= int(a.phys_port_cnt); n++ {
		var pa C.struct_ibv_port_attr
		if rc := C.ibcoll_query_port(c.ctx, C.uint8_t(n), &pa); rc != 0 {
			return DeviceAttr{}, 0, errnoError("Query", unix.Errno(rc), fmt.Sprintf("ibv_query_port %s port %d", c.name, n))
		}
		attr.Ports = append(attr.Ports, PortAttr{
			Num:        n,
			State:      PortState(pa.state),
			MaxMTU:     mtuBytes(int(pa.max_mtu)),
			ActiveMTU:  mtuBytes(int(pa.active_mtu)),
			LID:        uint16(pa.lid),
			SMLID:      uint16(pa.sm_lid),
			LinkLayer:  LinkLayer(pa.link_layer),
			GIDTblLen:  int(pa.gid_tbl_len),
			PKeyTblLen: int(pa.pkey_tbl_len),
		})
	}
	return attr, int(a.max_qp_init_rd_atom), nil
}

func (c *ibvContext) allocPD() (pdBackend, error) {
	pd, err := C.ibv_alloc_pd(c.ctx)
	if pd == nil {
		return nil, errnoError("AllocPD", errnoOf(err, unix.ENOMEM), "ibv_alloc_pd")
	}
	return &ibvPD{c: c, pd: pd}, nil
}

func (c *ibvContext) close() error {
	if rc, err := C.ibv_close_device(c.ctx); rc != 0 {
		return errnoError("Context.Close", rcErrno(rc, err), "ibv_close_device "+c.name)
	}
	c.ctx = nil
	return nil
}

// ibvPD is a protection domain.
type ibvPD struct {
	c  *ibvContext
	pd *C.struct_ibv_pd
}

func (p *ibvPD) regMR(addr uintptr, length int, access Access) (mrBackend, error) {
	mr, err := C.ibcoll_reg_mr(p.pd, C.uintptr_t(addr), C.size_t(length), C.uint(access&^accessHints))
	if mr != nil {
		return &ibvMR{mr: mr, path: "ibv_reg_mr"}, nil
	}
	regErr := errnoError("RegMR", errnoOf(err, unix.ENOMEM), fmt.Sprintf("ibv_reg_mr %d bytes at %#x", length, addr))
	if mem.TypeOf(addr) != mem.CUDA {
		return nil, regErr
	}
	// Device memory that ibv_reg_mr refused: no peer-memory module
	// (nvidia-peermem) serves this NIC. The kernel's own route is a dma-buf
	// that the CUDA driver exports and the NIC imports.
	m, derr := p.regCUDADMABuf(addr, length, access)
	if derr != nil {
		var e *Error
		if errors.As(regErr, &e) {
			e.Detail += fmt.Sprintf("; dma-buf fallback: %v", derr)
		}
		return nil, regErr
	}
	return m, nil
}

// regCUDADMABuf registers CUDA device memory through a dma-buf export, at
// its own virtual address (the iova), so peers address it as any other MR.
func (p *ibvPD) regCUDADMABuf(addr uintptr, length int, access Access) (mrBackend, error) {
	d, err := mem.ExportDMABuf(addr, length)
	if err != nil {
		return nil, err
	}
	// The MR holds its own reference to the dma-buf.
	defer unix.Close(d.FD)
	return p.regDMABufMR(d.FD, d.Offset(addr), length, uint64(addr), access)
}

func (p *ibvPD) regDMABufMR(fd, offset, length int, iova uint64, access Access) (mrBackend, error) {
	mr, err := C.ibcoll_reg_dmabuf_mr(p.pd, C.uint64_t(offset), C.size_t(length), C.uint64_t(iova), C.int(fd), C.uint(access&^accessHints))
	if mr == nil {
		return nil, errnoError("RegDMABufMR", errnoOf(err, unix.EOPNOTSUPP), fmt.Sprintf("ibv_reg_dmabuf_mr fd %d offset %d length %d", fd, offset, length))
	}
	return &ibvMR{mr: mr, path: "ibv_reg_dmabuf_mr"}, nil
}

func (p *ibvPD) regDMMR(dm dmBackend, offset, length int, access Access) (mrBackend, error) {
	d, ok := dm.(*ibvDM)
	if !ok {
		return nil, invalid("RegDMMR", "DM of another provider")
	}
	mr, err := C.ibcoll_reg_dm_mr(p.pd, d.dm, C.uint64_t(offset), C.size_t(length), C.uint(access&^accessHints))
	if mr == nil {
		return nil, errnoError("RegDMMR", errnoOf(err, unix.EOPNOTSUPP), fmt.Sprintf("ibv_reg_dm_mr offset %d length %d", offset, length))
	}
	return &ibvMR{mr: mr, path: "ibv_reg_dm_mr"}, nil
}

func (p *ibvPD) close() error {
	if rc, err := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return errnoError("PD.Close", rcErrno(rc, err), "ibv_dealloc_pd")
	}
	p.pd = nil
	return nil
}

// ibvMR is a memory region; its keys never change.
type ibvMR struct {
	mr   *C.struct_ibv_mr
	path string
}

func (m *ibvMR) via() string { return m.path }

func (m *ibvMR) lkey() uint32 { return uint32(m.mr.lkey) }
func (m *ibvMR) rkey() uint32 { return uint32(m.mr.rkey) }

func (m *ibvMR) close() error {
	if rc, err := C.ibv_dereg_mr(m.mr); rc != 0 {
		return errnoError("MR.Close", rcErrno(rc, err), "ibv_dereg_mr")
	}
	m.mr = nil
	return nil
}

// allocDM wraps ibv_alloc_dm(3). Providers without device memory (all but
// mlx5) fail with EOPNOTSUPP, which maps to ErrNotSupported.
func (c *ibvContext) allocDM(size int) (dmBackend, error) {
	dm, err := C.ibcoll_alloc_dm(c.ctx, C.size_t(size), 0)
	if dm == nil {
		errno := errnoOf(err, unix.EOPNOTSUPP)
		detail := fmt.Sprintf("ibv_alloc_dm %d bytes on %s", size, c.name)
		if c.attr.MaxDMSize == 0 {
			detail += " (the device reports no device memory)"
		}
		return nil, errnoError("AllocDM", errno, detail)
	}
	return &ibvDM{dm: dm, size: size}, nil
}

// ibvDM is a device-memory region.
type ibvDM struct {
	dm   *C.struct_ibv_dm
	size int
}

func (d *ibvDM) copyTo(offset int, src []byte) error {
	if rc := C.ibcoll_memcpy_to_dm(d.dm, C.uint64_t(offset), unsafe.Pointer(&src[0]), C.size_t(len(src))); rc != 0 {
		return errnoError("CopyTo", unix.Errno(rc), "ibv_memcpy_to_dm")
	}
	return nil
}

func (d *ibvDM) copyFrom(dst []byte, offset int) error {
	if rc := C.ibcoll_memcpy_from_dm(unsafe.Pointer(&dst[0]), d.dm, C.uint64_t(offset), C.size_t(len(dst))); rc != 0 {
		return errnoError("CopyFrom", unix.Errno(rc), "ibv_memcpy_from_dm")
	}
	return nil
}

func (d *ibvDM) close() error {
	if rc := C.ibcoll_free_dm(d.dm); rc != 0 {
		return errnoError("DM.Close", unix.Errno(rc), "ibv_free_dm")
	}
	d.dm = nil
	return nil
}
