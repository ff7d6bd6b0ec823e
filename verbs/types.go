package verbs

import (
	"encoding/binary"
	"fmt"
	"net"
	"strings"
)

// Access is a memory-region access mask. The values equal the IBV_ACCESS_*
// bits, so the ibv provider passes them through unchanged.
type Access uint32

const (
	AccessLocalWrite   Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC

	// HintOwnerReads is a hint, not a right: the memory's owner reads what peers
	// write into it soon after it lands (a transport's receive scratch, which it folds
	// or forwards). A NIC writes by DMA and leaves no line of it in any core's cache,
	// so ibv drops the bit. soft0, whose writes are the poster's CPU stores, writes
	// such memory with non-temporal stores: with plain stores the lines the owner had
	// read sat in its core's cache, and every write had to take them from there first,
	// which made a 1 MiB write 5× slower on the project's machine (docs/design.md,
	// "Writes that the owner reads").
	HintOwnerReads Access = 1 << 31

	accessAll   = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	accessHints = HintOwnerReads
)

// validate applies the rule every provider enforces: a remote write or
// atomic lands in local memory, so it needs local write too.
func (a Access) validate() error {
	if a&^(accessAll|accessHints) != 0 {
		return fmt.Errorf("access: unknown bits %#x", uint32(a&^(accessAll|accessHints)))
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return fmt.Errorf("access: %v needs AccessLocalWrite", a)
	}
	return nil
}

func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	var s []string
	for _, f := range []struct {
		bit  Access
		name string
	}{{AccessLocalWrite, "local-write"}, {AccessRemoteWrite, "remote-write"}, {AccessRemoteRead, "remote-read"}, {AccessRemoteAtomic, "remote-atomic"}, {HintOwnerReads, "hint-owner-reads"}} {
		if a&f.bit != 0 {
			s = append(s, f.name)
		}
	}
	if rest := a &^ accessAll; rest != 0 {
		s = append(s, fmt.Sprintf("%#x", uint32(rest)))
	}
	return strings.Join(s, "|")
}

// QPType selects the transport service of a queue pair. Only RC exists:
// collectives need reliable, ordered, RDMA-capable connections.
type QPType uint8

const (
	QPTypeRC QPType = iota + 1
)

func (t QPType) String() string {
	if t == QPTypeRC {
		return "RC"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState mirrors enum ibv_qp_state.
type QPState uint8

const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateError
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// Opcode is a send work-request opcode. Zero is deliberately invalid so
// that a forgotten Op is caught at post time instead of becoming a write.
type Opcode uint8

const (
	OpSend Opcode = iota + 1
	OpSendWithImm
	OpRDMAWrite
	OpRDMAWriteWithImm
	OpRDMARead
	OpAtomicFetchAdd
	OpAtomicCmpSwap
)

var opcodeNames = [...]string{"", "SEND", "SEND_WITH_IMM", "RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "RDMA_READ", "ATOMIC_FETCH_AND_ADD", "ATOMIC_CMP_AND_SWP"}

func (o Opcode) String() string {
	if o > 0 && int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

func (o Opcode) valid() bool { return o >= OpSend && o <= OpAtomicCmpSwap }

func (o Opcode) isAtomic() bool { return o == OpAtomicFetchAdd || o == OpAtomicCmpSwap }

// WCStatus is a work-completion status. The values equal enum ibv_wc_status.
type WCStatus uint8

const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRdReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
)

var wcStatusNames = [...]string{
	"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
	"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
	"REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
	"REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
	"RESP_TIMEOUT_ERR", "GENERAL_ERR",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode says what a completion completed.
type WCOpcode uint8

const (
	WCSend WCOpcode = iota + 1
	WCRDMAWrite
	WCRDMARead
	WCCompSwap
	WCFetchAdd
	WCRecv
	WCRecvRDMAWithImm
)

var wcOpcodeNames = [...]string{"", "SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "RECV", "RECV_RDMA_WITH_IMM"}

func (o WCOpcode) String() string {
	if o > 0 && int(o) < len(wcOpcodeNames) {
		return wcOpcodeNames[o]
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// wcOpFor is the completion opcode of a successful send-queue request.
func wcOpFor(op Opcode) WCOpcode {
	switch op {
	case OpSend, OpSendWithImm:
		return WCSend
	case OpRDMAWrite, OpRDMAWriteWithImm:
		return WCRDMAWrite
	case OpRDMARead:
		return WCRDMARead
	case OpAtomicCmpSwap:
		return WCCompSwap
	case OpAtomicFetchAdd:
		return WCFetchAdd
	}
	return 0
}

// QPConfig describes a queue pair to create.
type QPConfig struct {
	Type      QPType // zero means RC
	SendCQ    *CQ
	RecvCQ    *CQ
	MaxSendWR int
	MaxRecvWR int
	MaxSGE    int // per work request, send and receive
	MaxInline int
}

// SGE is one scatter/gather element. Addr is a virtual address inside the
// MR named by LKey, or an offset for a zero-based (DM) MR.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send-queue work request. Imm is in host byte order; the ibv
// provider converts it to the wire's big-endian form.
type SendWR struct {
	ID         uint64
	Op         Opcode
	SGE        []SGE
	Signaled   bool
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64 // compare value for CmpSwap, addend for FetchAdd
	Swap       uint64
	// Inline copies the SGEs' bytes into the request at PostSend (no LKey
	// needed), as ibv_post_send(3) with IBV_SEND_INLINE does: PostSend itself
	// reads [Addr, Addr+Length) of each SGE, so they must be readable memory
	// of this process. Like the C library, PostSend cannot check that without
	// a system call per request: a wild address crashes the caller there.
	Inline bool
}

// RecvWR is a receive-queue work request.
type RecvWR struct {
	ID  uint64
	SGE []SGE
}

// WC is a work completion.
type WC struct {
	ID     uint64
	Status WCStatus
	Op     WCOpcode
	Bytes  uint32
	Imm    uint32 // host byte order; valid when HasImm
	HasImm bool
	QPN    uint32
	// VendorErr is the provider's vendor syndrome for failed completions.
	VendorErr uint32
}

// Err returns nil for a successful completion and a *CompletionError
// otherwise, so callers can use the usual error plumbing.
func (wc *WC) Err() error {
	if wc == nil {
		return invalid("WC.Err", "nil WC")
	}
	if wc.Status == WCSuccess {
		return nil
	}
	return &CompletionError{Status: wc.Status, ID: wc.ID, QPN: wc.QPN, Op: wc.Op, VendorErr: wc.VendorErr}
}

// GID is a 128-bit global identifier (an IPv6 address on RoCE).
type GID [16]byte

func (g GID) String() string { return net.IP(g[:]).String() }

// IsZero reports whether the GID is all zeros (an unused table entry).
func (g GID) IsZero() bool { return g == GID{} }

// QPInfo is what a peer needs to connect to a queue pair.
type QPInfo struct {
	LID      uint16
	GID      GID
	QPN      uint32
	PSN      uint32
	Port     uint8
	GIDIndex uint8  // the sender's own GID index, informational
	MTU      uint16 // the sender's active path MTU in bytes
	// DeviceGUID tells providers apart: soft QPs only reach soft QPs of
	// the same process.
	DeviceGUID uint64
}

const qpInfoVersion = 1

// qpInfoSize is the encoded length: version, LID, GID, QPN, PSN, Port,
// GIDIndex, MTU, DeviceGUID.
const qpInfoSize = 1 + 2 + 16 + 4 + 4 + 1 + 1 + 2 + 8

// MarshalBinary encodes the info in a fixed little-endian layout.
func (q QPInfo) MarshalBinary() ([]byte, error) {
	b := make([]byte, qpInfoSize)
	b[0] = qpInfoVersion
	binary.LittleEndian.PutUint16(b[1:], q.LID)
	copy(b[3:19], q.GID[:])
	binary.LittleEndian.PutUint32(b[19:], q.QPN)
	binary.LittleEndian.PutUint32(b[23:], q.PSN)
	b[27] = q.Port
	b[28] = q.GIDIndex
	binary.LittleEndian.PutUint16(b[29:], q.MTU)
	binary.LittleEndian.PutUint64(b[31:], q.DeviceGUID)
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary produced and rejects
// anything else, since the bytes come from another process.
func (q *QPInfo) UnmarshalBinary(b []byte) error {
	if len(b) != qpInfoSize {
		return newError("QPInfo.UnmarshalBinary", ErrInvalid, fmt.Sprintf("data is %d bytes, want %d", len(b), qpInfoSize))
	}
	if b[0] != qpInfoVersion {
		return newError("QPInfo.UnmarshalBinary", ErrInvalid, fmt.Sprintf("version %d, want %d", b[0], qpInfoVersion))
	}
	q.LID = binary.LittleEndian.Uint16(b[1:])
	copy(q.GID[:], b[3:19])
	q.QPN = binary.LittleEndian.Uint32(b[19:])
	q.PSN = binary.LittleEndian.Uint32(b[23:])
	q.Port = b[27]
	q.GIDIndex = b[28]
	q.MTU = binary.LittleEndian.Uint16(b[29:])
	q.DeviceGUID = binary.LittleEndian.Uint64(b[31:])
	return nil
}

// PortState mirrors enum ibv_port_state.
type PortState uint8

const (
	PortNop PortState = iota
	PortDown
	PortInit
	PortArmed
	PortActive
	PortActiveDefer
)

var portStateNames = [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

func (s PortState) String() string {
	if int(s) < len(portStateNames) {
		return portStateNames[s]
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// LinkLayer is the port's link layer.
type LinkLayer uint8

const (
	LinkLayerUnspecified LinkLayer = iota
	LinkLayerInfiniBand
	LinkLayerEthernet
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unspecified"
}

// GIDType is the type of a GID table entry.
type GIDType uint8

const (
	GIDTypeIB GIDType = iota
	GIDTypeRoCEv1
	GIDTypeRoCEv2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// GIDEntry is one populated entry of a port's GID table.
type GIDEntry struct {
	Index  int
	GID    GID
	Type   GIDType
	Netdev string // the netdev the GID belongs to, RoCE only
}

// IsIPv4 reports whether the GID is an IPv4-mapped address (::ffff:a.b.c.d).
func (e GIDEntry) IsIPv4() bool { return net.IP(e.GID[:]).To4() != nil }

// PortInfo describes one port of a device.
type PortInfo struct {
	Num       int
	State     PortState
	LinkLayer LinkLayer
	LID       uint16
	ActiveMTU int // bytes
	GIDs      []GIDEntry
}

// DeviceInfo describes a device as Devices lists it.
type DeviceInfo struct {
	Name     string
	Provider string // "ibv" or "soft"
	NodeGUID uint64
	Ports    []PortInfo
	Netdev   string // first netdev of the device, if any
	PCIAddr  string // e.g. 0000:3b:00.0; empty for virtual devices
	NUMANode int    // -1 when unknown
}

// Active reports whether any port of the device is active.
func (d DeviceInfo) Active() bool {
	for _, p := range d.Ports {
		if p.State == PortActive {
			return true
		}
	}
	return false
}

// DeviceAttr is what Query returns: the device's limits and its ports.
type DeviceAttr struct {
	Name         string
	Provider     string
	FWVer        string
	NodeGUID     uint64
	SysImageGUID uint64
	VendorID     uint32
	VendorPartID uint32
	MaxMRSize    uint64
	MaxQP        int
	MaxQPWR      int
	MaxSGE       int
	MaxCQ        int
	MaxCQE       int
	MaxMR        int
	MaxPD        int
	MaxQPRdAtom  int
	AtomicCap    bool
	MaxDMSize    uint64 // 0: no device memory
	// DMUncachedReads: the CPU reads the device's memory (DM.CopyFrom) through
	// uncached loads across the bus, a few bytes per round trip, so that a copy out
	// of it is better made by the NIC. True for a real device with device memory;
	// soft0's is host memory, and reports it only with Options.SoftDMUncached.
	DMUncachedReads bool
	Ports           []PortAttr
}

// PortAttr holds a port's attributes from ibv_query_port.
type PortAttr struct {
	Num        int
	State      PortState
	MaxMTU     int // bytes
	ActiveMTU  int // bytes
	LID        uint16
	SMLID      uint16
	LinkLayer  LinkLayer
	GIDTblLen  int
	PKeyTblLen int // partition keys: Options.PKeyIndex is below it
}

// mtuBytes converts enum ibv_mtu (1..5) to bytes.
func mtuBytes(e int) int {
	if e < 1 || e > 5 {
		return 0
	}
	return 128 << e
}

// mtuEnum converts bytes to enum ibv_mtu, rounding down; 0 if below 256.
func mtuEnum(b int) int {
	e := 0
	for m := 256; m <= b && e < 5; m <<= 1 {
		e++
	}
	return e
}
