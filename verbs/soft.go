package verbs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ibcoll/ibcoll/internal/errs"
	"github.com/ibcoll/ibcoll/mem"

	"golang.org/x/sys/unix"
)

// The soft provider is an in-process RDMA device. Every Context opened on
// soft0 shares one device, as processes share a NIC, so QPs of different
// contexts (ranks) connect to each other. Each connected QP has a worker
// goroutine that plays the NIC: it executes send-queue requests in order,
// moves bytes between registered regions, and posts completions. Nothing
// here is reachable across processes.

// ErrInjected marks failures made by fault injection, so tests can tell
// them from real ones.
var ErrInjected = errs.ErrInjected

// softPKeys is the length of soft0's partition key table: the default key only.
const softPKeys = 1

// DefaultSoftDMCapacity is soft0's device memory, the size of a typical
// mlx5 MEMIC window.
const DefaultSoftDMCapacity = 256 << 10

type softDevice struct {
	guid uint64
	gid  GID

	mu      sync.RWMutex
	qps     map[uint32]*softQP
	mrs     map[uint32]*softMR
	nextQPN uint32
	nextKey uint32
	dmCap   int
	dmUsed  int
	nextLID uint16 // the last LID given to a context opened with an InfiniBand port
}

var softDev = func() *softDevice {
	var b [8]byte
	_, _ = rand.Read(b[:])
	d := &softDevice{
		guid:    binary.BigEndian.Uint64(b[:]) | 1,
		qps:     map[uint32]*softQP{},
		mrs:     map[uint32]*softMR{},
		nextQPN: 0x100,
		nextKey: 0x1000,
		dmCap:   DefaultSoftDMCapacity,
		nextLID: 1, // LID 1 is the default port's
	}
	d.gid[0], d.gid[1] = 0xfe, 0x80
	copy(d.gid[8:], b[:])
	return d
}()

func softInfo() DeviceInfo {
	return DeviceInfo{
		Name:     SoftDeviceName,
		Provider: "soft",
		NodeGUID: softDev.guid,
		Ports: []PortInfo{{
			Num: 1, State: PortActive, LinkLayer: LinkLayerInfiniBand, LID: 1, ActiveMTU: 4096,
			GIDs: []GIDEntry{{Index: 0, GID: softDev.gid, Type: GIDTypeIB}},
		}},
		NUMANode: -1,
	}
}

type softProvider struct{}

func (softProvider) name() string { return "soft" }

func (softProvider) devices(fs.FS) ([]DeviceInfo, error) { return []DeviceInfo{softInfo()}, nil }

func (softProvider) open(name string, o Options) (ctxBackend, DeviceInfo, error) {
	if name != SoftDeviceName {
		return nil, DeviceInfo{}, newError("Open", ErrNoDevice, fmt.Sprintf("no soft device %q", name))
	}
	if o.PKeyIndex >= softPKeys {
		return nil, DeviceInfo{}, invalid("Open", "partition key index %d (Options.PKeyIndex; coll.Config.PKeyIndex, $%s): soft0's port has %d partition key", o.PKeyIndex, PKeyIndexEnv, softPKeys)
	}
	c := &softCtx{dev: softDev, gpuDirect: o.SoftGPUDirect, noDM: o.SoftNoDM, dmUncached: o.SoftDMUncached, noAtomics: o.SoftNoAtomics, ll: o.SoftLinkLayer, lid: 1,
		path: Path{ServiceLevel: o.ServiceLevel, MTU: 4096}}
	if o.SoftLinkLayer == LinkLayerEthernet {
		c.path.TrafficClass = o.TrafficClass // only a GRH carries it
	}
	switch o.SoftLinkLayer {
	case LinkLayerUnspecified:
	case LinkLayerInfiniBand:
		softDev.mu.Lock()
		if softDev.nextLID == 0xbfff { // the last unicast LID: start again above the default's
			softDev.nextLID = 1
		}
		softDev.nextLID++
		c.lid = softDev.nextLID
		softDev.mu.Unlock()
	case LinkLayerEthernet:
		c.lid = 0
	default:
		return nil, DeviceInfo{}, invalid("Open", "Options.SoftLinkLayer %d is not a link layer", o.SoftLinkLayer)
	}
	info := softInfo()
	info.Ports[0] = c.port()
	return c, info, nil
}

// port describes the context's port, as its link layer makes it.
func (c *softCtx) port() PortInfo {
	p := PortInfo{Num: 1, State: PortActive, LinkLayer: LinkLayerInfiniBand, LID: c.lid, ActiveMTU: 4096,
		GIDs: []GIDEntry{{Index: 0, GID: c.dev.gid, Type: GIDTypeIB}}}
	switch c.ll {
	case LinkLayerInfiniBand:
		p.GIDs = nil // addressed by LID alone
	case LinkLayerEthernet:
		p.LinkLayer = LinkLayerEthernet
		p.GIDs[0].Type = GIDTypeRoCEv2
	}
	return p
}

// softCtx is a soft0 context. faults and delay are set through Soft.
type softCtx struct {
	dev    *softDevice
	fmu    sync.Mutex
	faults [FaultFreeDM + 1]int // operations of each kind left before one fails; 0: none
	delay  atomic.Int64         // time.Duration added before each completion
	// postArmed: a FaultPostSend is set, so posts take fmu to count their
	// requests; without one, a post does not touch the lock.
	postArmed atomic.Bool
	// gpuDirect: CUDA device memory registers, and its bytes move through the
	// CUDA copy engine (Options.SoftGPUDirect).
	gpuDirect bool
	noDM      bool // Options.SoftNoDM
	// dmUncached: Options.SoftDMUncached
	dmUncached bool
	noAtomics  bool      // Options.SoftNoAtomics
	path       Path      // what its QPs report (Options: service level, traffic class)
	ll         LinkLayer // Options.SoftLinkLayer
	lid        uint16    // the port's LID: 1, one of its own (InfiniBand), 0 (Ethernet)
	// pending: the events Soft.RaiseEvent raised that Events has not taken
	emu     sync.Mutex
	pending []AsyncEvent
	gone    bool // Soft.Disassociate: reads of events fail once the pending ones are read
}

// fault consumes one operation of kind and says whether it must fail.
func (c *softCtx) fault(kind FaultKind, op string) error {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if c.faults[kind] == 0 {
		return nil
	}
	c.faults[kind]--
	if c.faults[kind] == 0 {
		return &Error{Op: op, Kind: ErrInjected, Errno: unix.ENOMEM, Detail: "soft0 " + kind.String() + " fault"}
	}
	return nil
}

// postFault consumes the n requests of one PostSend and says at which of them
// a FaultPostSend fires (n when none does), with the error it gives.
func (c *softCtx) postFault(n int) (int, error) {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	left := c.faults[FaultPostSend]
	if left == 0 || left > n {
		c.faults[FaultPostSend] = max(left-n, 0)
		return n, nil
	}
	c.faults[FaultPostSend] = 0
	c.postArmed.Store(false)
	i := left - 1
	return i, &Error{Op: "PostSend", Kind: ErrInjected, Errno: unix.ENOMEM, Posted: i,
		Detail: fmt.Sprintf("soft0 %s fault: wrs[%d] of %d refused; wrs[:%d] were posted", FaultPostSend, i, n, i)}
}

func (c *softCtx) query() (DeviceAttr, error) {
	c.dev.mu.RLock()
	dmCap := c.dev.dmCap
	c.dev.mu.RUnlock()
	if c.noDM {
		dmCap = 0
	}
	port := c.port()
	return DeviceAttr{
		Name: SoftDeviceName, Provider: "soft", FWVer: "soft", NodeGUID: c.dev.guid, SysImageGUID: c.dev.guid,
		MaxMRSize: 1 << 40, MaxQP: 1 << 20, MaxQPWR: 1 << 15, MaxSGE: 32, MaxCQ: 1 << 20, MaxCQE: 1 << 20,
		MaxMR: 1 << 20, MaxPD: 1 << 20, MaxQPRdAtom: 16, AtomicCap: !c.noAtomics, MaxDMSize: uint64(dmCap),
		DMUncachedReads: c.dmUncached && dmCap > 0,
		Ports: []PortAttr{{Num: 1, State: PortActive, MaxMTU: 4096, ActiveMTU: 4096, LID: port.LID, SMLID: min(port.LID, 1),
			LinkLayer: port.LinkLayer, GIDTblLen: len(port.GIDs), PKeyTblLen: softPKeys}},
	}, nil
}

func (c *softCtx) allocPD() (pdBackend, error) {
	if err := c.fault(FaultAllocPD, "AllocPD"); err != nil {
		return nil, err
	}
	return &softPD{ctx: c}, nil
}

func (c *softCtx) createCQ(depth int) (cqBackend, error) {
	if err := c.fault(FaultCreateCQ, "CreateCQ"); err != nil {
		return nil, err
	}
	return &softCQ{ring: make([]WC, depth), notify: make(chan struct{}, 1)}, nil
}

func (c *softCtx) allocDM(size int) (dmBackend, error) {
	if err := c.fault(FaultAllocDM, "AllocDM"); err != nil {
		return nil, err
	}
	if c.noDM {
		return nil, errnoError("AllocDM", unix.EOPNOTSUPP, "this soft0 context was opened without device memory (Options.SoftNoDM)")
	}
	d := c.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dmCap == 0 {
		return nil, errnoError("AllocDM", unix.EOPNOTSUPP, "soft0 has no device memory (capacity 0)")
	}
	if size > d.dmCap-d.dmUsed {
		return nil, errnoError("AllocDM", unix.ENOMEM, fmt.Sprintf("%d bytes requested, %d of %d free", size, d.dmCap-d.dmUsed, d.dmCap))
	}
	// Device memory is mmap'd so that no Go heap sits behind an MR.
	rounded := (size + 4095) &^ 4095
	mem, err := unix.Mmap(-1, 0, rounded, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, errnoError("AllocDM", err.(unix.Errno), "mmap")
	}
	d.dmUsed += size
	return &softDM{ctx: c, mem: mem[:size], raw: mem}, nil
}

func (c *softCtx) close() error { return nil }

func (c *softCtx) asyncEvents(dst []AsyncEvent) ([]AsyncEvent, error) {
	c.emu.Lock()
	defer c.emu.Unlock()
	dst = append(dst, c.pending...)
	c.pending = c.pending[:0]
	if c.gone {
		return dst, errnoError("Events", unix.EIO, "reading the events of a disassociated device")
	}
	return dst, nil
}

func (c *softCtx) portNum() int { return 1 }

type softPD struct{ ctx *softCtx }

func (p *softPD) regMR(addr uintptr, length int, access Access) (mrBackend, error) {
	if err := p.ctx.fault(FaultRegMR, "RegMR"); err != nil {
		return nil, err
	}
	// The soft NIC is the CPU: it moves bytes with memcpy, which device memory
	// would crash. It asks the driver what the memory is, as a NIC's peer-memory
	// client does, and takes device memory only as the GPUDirect stand-in.
	typ := mem.TypeOf(addr)
	gpu := typ == mem.CUDA
	if gpu && !p.ctx.gpuDirect {
		return nil, newError("RegMR", ErrNotSupported,
			fmt.Sprintf("%#x is CUDA device memory, which soft0 reaches only as the GPUDirect stand-in (Options.SoftGPUDirect)", addr))
	}
	if !gpu && !mapped(addr, length) {
		return nil, newError("RegMR", ErrInvalid, fmt.Sprintf("[%#x, %#x) is not all mapped memory", addr, addr+uintptr(length)))
	}
	// Managed memory is the CUDA driver's to map in and out on the CPU's faults: its
	// mappings' permissions say nothing of what the CPU may do.
	if !gpu && typ != mem.CUDAManaged {
		if why := protected(addr, length, access); why != "" {
			// EFAULT, as ibv_reg_mr's pin refuses it: callers tell it apart (tlmlx5's
			// read-only fallback for sources).
			return nil, errnoError("RegMR", unix.EFAULT, fmt.Sprintf("[%#x, %#x): %s", addr, addr+uintptr(length), why))
		}
	}
	// Host memory pinned for CUDA is there for the copy engine to read by DMA (staging
	// scratch): writes into it bypass the CPU caches, since a DMA read of lines left
	// dirty in a CPU cache took twice as long on an H200 (docs/design.md, "Staging").
	stream := !gpu && mem.PinnedHost(addr)
	// Memory whose owner reads what lands (HintOwnerReads) is written the same way
	// from ownerReadsStreamMin up.
	ownerReads := !gpu && access&HintOwnerReads != 0
	return p.ctx.dev.addMR(&softMR{pd: p, base: ptrOf(addr), iova: uint64(addr), length: uint64(length), access: access, gpu: gpu, stream: stream, ownerReads: ownerReads}), nil
}

// mapped reports whether every page of [addr, addr+length) is mapped. ibv_reg_mr pins
// the pages and fails (EFAULT) where one is not; soft0, which moves the bytes with
// memcpy, would crash on them at the first write instead. mincore fails with ENOMEM
// for a range with an unmapped page; it is asked a window at a time, so that its
// vector stays small whatever the registration's size. A mapping without access
// (PROT_NONE) passes: mincore does not look at permissions, which protected does.
func mapped(addr uintptr, length int) bool {
	const window = 1 << 12 // pages per call
	pg := uintptr(unix.Getpagesize())
	start := addr &^ (pg - 1)
	end := (addr + uintptr(length) + pg - 1) &^ (pg - 1)
	if end <= start { // the range ends in the top page, which user space never maps
		return false
	}
	var vec [window]byte
	for at := start; at < end; {
		n := min(end-at, window*pg)
		_, _, e := unix.Syscall(unix.SYS_MINCORE, at, n, uintptr(unsafe.Pointer(&vec[0])))
		if e == unix.ENOMEM {
			return false
		}
		at += n
	}
	return true
}

func (p *softPD) regDMMR(dmb dmBackend, offset, length int, access Access) (mrBackend, error) {
	if err := p.ctx.fault(FaultRegMR, "RegDMMR"); err != nil {
		return nil, err
	}
	dm := dmb.(*softDM)
	return p.ctx.dev.addMR(&softMR{pd: p, base: unsafe.Pointer(&dm.mem[offset]), iova: 0, length: uint64(length), access: access}), nil
}

func (p *softPD) regDMABufMR(int, int, int, uint64, Access) (mrBackend, error) {
	return nil, newError("RegDMABufMR", ErrNotSupported, "soft0 has no dma-buf import (its GPUDirect stand-in registers device pointers with RegMR)")
}

func (p *softPD) close() error { return nil }

func (d *softDevice) addMR(m *softMR) *softMR {
	d.mu.Lock()
	d.nextKey++
	m.key = d.nextKey
	d.mrs[m.key] = m
	d.mu.Unlock()
	return m
}

// softMR is a registered region. users counts data movements in progress,
// so deregistration can wait for them: after MR.Close returns the device
// no longer touches the memory, as with a real NIC.
type softMR struct {
	pd     *softPD
	key    uint32
	base   unsafe.Pointer
	iova   uint64
	length uint64
	access Access
	users  atomic.Int32
	dead   atomic.Bool
	gpu    bool // CUDA device memory: bytes move through the copy engine
	stream bool // host memory pinned for CUDA: written with non-temporal stores
	// ownerReads: registered with HintOwnerReads; writes of ownerReadsStreamMin or
	// more go with non-temporal stores.
	ownerReads bool
	streamed   atomic.Int64 // bytes written into it with non-temporal stores (Soft.Streamed)
	pulled     atomic.Int64 // bytes its owner's poller copied itself (Soft.Pulled)
}

func (m *softMR) lkey() uint32 { return m.key }

// ownerReadsStreamMin is the smallest write into memory registered with
// HintOwnerReads that goes with non-temporal stores. Below it the lines stay in the
// writer's cache, where the owner finds them: 2-rank persistent allreduce and
// reduce_scatter of 16 KiB took 11.0 µs streamed against 8.8 plain (p50 of six
// alternated rounds), while from 64 KiB streaming halved a 2-rank reduce
// (docs/design.md, "Writes that the owner reads").
const ownerReadsStreamMin = 32 << 10

// streams says whether soft0 writes n bytes into m with non-temporal stores.
func (m *softMR) streams(n uint64) bool {
	return m.stream || (m.ownerReads && n >= ownerReadsStreamMin)
}

func (m *softMR) via() string {
	switch {
	case m.gpu:
		return "soft0 GPUDirect stand-in"
	case m.stream:
		return "soft0, non-temporal writes (host memory pinned for CUDA)"
	case m.ownerReads:
		return fmt.Sprintf("soft0, its owner reads what lands: writes with immediate of %d-%d KiB posted alone offered to its poller, other writes from %d KiB non-temporal",
			pullMin>>10, pullMax>>10, ownerReadsStreamMin>>10)
	}
	return "soft0"
}

func (m *softMR) rkey() uint32 { return m.key }

func (m *softMR) close() error {
	if err := m.pd.ctx.fault(FaultDeregMR, "MR.Close"); err != nil {
		return err
	}
	d := m.pd.ctx.dev
	d.mu.Lock()
	delete(d.mrs, m.key)
	d.mu.Unlock()
	m.dead.Store(true)
	for m.users.Load() != 0 {
		time.Sleep(10 * time.Microsecond)
	}
	return nil
}

// use resolves [addr, addr+n) of the MR with key to a pointer and takes a
// user reference; the caller must call m.users.Add(-1) when done.
func (d *softDevice) use(key uint32, pd *softPD, addr, n uint64, need Access) (*softMR, unsafe.Pointer, bool) {
	d.mu.RLock()
	m := d.mrs[key]
	d.mu.RUnlock()
	if m == nil || m.pd != pd || m.access&need != need {
		return nil, nil, false
	}
	if addr < m.iova || addr-m.iova > m.length || n > m.length-(addr-m.iova) {
		return nil, nil, false
	}
	m.users.Add(1)
	if m.dead.Load() {
		m.users.Add(-1)
		return nil, nil, false
	}
	return m, unsafe.Add(m.base, addr-m.iova), true
}

type softDM struct {
	ctx *softCtx
	mem []byte
	raw []byte
}

func (d *softDM) copyTo(offset int, src []byte) error {
	copy(d.mem[offset:], src)
	return nil
}

func (d *softDM) copyFrom(dst []byte, offset int) error {
	copy(dst, d.mem[offset:offset+len(dst)])
	return nil
}

func (d *softDM) close() error {
	if err := d.ctx.fault(FaultFreeDM, "DM.Close"); err != nil {
		return err
	}
	if err := unix.Munmap(d.raw); err != nil {
		return errnoError("DM.Close", err.(unix.Errno), "munmap")
	}
	dev := d.ctx.dev
	dev.mu.Lock()
	dev.dmUsed -= len(d.mem)
	dev.mu.Unlock()
	return nil
}

// softCQ is a ring of completions. notify holds at most one token, which
// a push leaves behind, so a waiter never misses a completion; a waiter
// that takes the token passes it on until every goroutine that waited at
// the push has woken, and nothing allocates.
type softCQ struct {
	mu      sync.Mutex
	ring    []WC
	head, n int
	overrun bool
	waiting int // goroutines in wait
	wakeups int // of them, how many the last push still has to wake
	notify  chan struct{}
	pulls   []*softPull  // writes its pollers copy (soft_pull.go)
	npulls  atomic.Int32 // len(pulls), read without mu
}

func (c *softCQ) push(wc WC) {
	c.mu.Lock()
	if c.n == len(c.ring) {
		c.overrun = true
	} else {
		c.ring[(c.head+c.n)%len(c.ring)] = wc
		c.n++
	}
	c.wakeups = c.waiting
	c.mu.Unlock()
	c.signal()
}

func (c *softCQ) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *softCQ) poll(wcs []WC) (int, error) {
	if c.npulls.Load() > 0 {
		c.runPulls()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for k < len(wcs) && c.n > 0 {
		wcs[k] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	if k == 0 && c.overrun {
		return 0, errnoError("Poll", unix.EOVERFLOW, "completion queue overrun: completions were lost")
	}
	return k, nil
}

func (c *softCQ) wait(ctx context.Context) error {
	c.mu.Lock()
	if c.n > 0 || c.overrun || len(c.pulls) > 0 {
		c.mu.Unlock()
		return nil
	}
	c.waiting++
	c.mu.Unlock()
	select {
	case <-c.notify:
		c.mu.Lock()
		c.waiting--
		if c.wakeups > 0 {
			c.wakeups--
		}
		more := c.wakeups > 0
		c.mu.Unlock()
		if more {
			c.signal()
		}
		return nil
	case <-ctx.Done():
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
		return ctx.Err()
	}
}

func (c *softCQ) close() error { return nil }

// ptrOf turns an address from the caller into a pointer without the
// uintptr→unsafe.Pointer conversion vet flags; the caller vouches that
// the memory stays valid while registered.
func ptrOf(addr uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}
