package verbs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// SoftDeviceName is the name of the in-process software device.
const SoftDeviceName = "soft0"

// The environment variables below are the names by which a program's
// configuration conventionally passes the device and GID index. verbs
// itself never reads the environment (a library that did would act on
// settings its caller never saw); the layer that builds a program's
// configuration reads them and passes the values to OpenWith.
const (
	// DeviceEnv names the device to open: OpenWith's name.
	DeviceEnv = "IBCOLL_DEVICE"
	// GIDIndexEnv names the source GID index on RoCE: Options.GIDIndex.
	GIDIndexEnv = "IBCOLL_GID_INDEX"
	// TrafficClassEnv, ServiceLevelEnv and PKeyIndexEnv name Options.TrafficClass,
	// ServiceLevel and PKeyIndex.
	TrafficClassEnv = "IBCOLL_TRAFFIC_CLASS"
	ServiceLevelEnv = "IBCOLL_SERVICE_LEVEL"
	PKeyIndexEnv    = "IBCOLL_PKEY_INDEX"
)

// maxGIDIndex is the largest GID index: the address handle keeps it in
// eight bits.
const maxGIDIndex = 255

// Options tune how OpenWith opens a device. The zero value makes every
// choice automatically; it is what Open uses.
type Options struct {
	// GIDIndex is the source GID index of the context's QPs on a RoCE
	// port (InfiniBand routes by LID and ignores it), at most 255. Zero
	// or negative chooses per port: an IPv4-mapped RoCE v2 GID first,
	// then any RoCE v2 GID, then index 0. Since zero means automatic,
	// index 0 cannot be forced where the automatic choice finds a RoCE
	// v2 GID. soft0 has one GID and ignores GIDIndex.
	GIDIndex int
	// TrafficClass is the traffic class of the context's QPs on a RoCE port (the
	// GRH's, which carries the DSCP that a lossless fabric maps to its PFC/ECN
	// priority: NVIDIA's reference setting is DSCP 26, traffic class 104), from 0
	// to 255; 0 is the kernel's default. InfiniBand has no GRH here and ignores it.
	TrafficClass int
	// ServiceLevel is the QPs' service level (InfiniBand's SL, 0 to 15: the
	// subnet's QoS and adaptive-routing class; on RoCE, the priority of a VLAN
	// tag). 0 is the default.
	ServiceLevel int
	// PKeyIndex is the QPs' partition key index (InfiniBand partitions, SR-IOV
	// virtual functions whose full-membership key is not at index 0), below the
	// port's table length. 0 is the default.
	PKeyIndex int
	// SoftGPUDirect makes soft0 a stand-in for GPUDirect RDMA on a machine with a
	// GPU and no RDMA NIC: it accepts registrations of CUDA device memory and moves
	// their bytes with the CUDA copy engine. Off, soft0 refuses device memory, as a
	// NIC without peer-memory support does, so what it reports reaching is what it
	// really reaches. Real devices ignore it.
	SoftGPUDirect bool
	// SoftNoDM opens soft0 as a device without device memory, as rxe is: Query
	// reports MaxDMSize 0 and AllocDM fails with ErrNotSupported, for this
	// context only. Tests use it to run the branch of every DM capability check
	// that a real device without memory takes. Real devices ignore it.
	SoftNoDM bool
	// SoftDMUncached makes soft0 report its device memory as a real device's, which
	// the CPU reads through uncached loads (DeviceAttr.DMUncachedReads), so that the
	// transport's copies out of device memory take the NIC's path. soft0's device
	// memory is host memory, so the reads stay as fast as before: only the report
	// changes. Real devices ignore it.
	SoftDMUncached bool
	// SoftNoAtomics opens soft0 as a device without atomics (some mlx5 virtual
	// functions): Query reports AtomicCap false, PostSend refuses atomics, and its
	// QPs answer a peer's atomics with a remote access error, as a QP without remote
	// atomic access does. Real devices ignore it.
	SoftNoAtomics bool
	// SoftLinkLayer opens soft0 with the addressing of a link layer, so that
	// both branches of the link-layer checks run without a fabric.
	// LinkLayerInfiniBand gives the context a port of its own with a unique LID:
	// its QPs publish that LID and no GID, and Connect addresses the peer by LID
	// without a GRH, refusing LID 0 or a QP that is not at that LID, as an
	// InfiniBand subnet does. LinkLayerEthernet makes the port RoCE-like: LID 0,
	// one RoCE v2 GID, and Connect addresses the peer by GID (a GRH), refusing a
	// zero or foreign GID. LinkLayerUnspecified keeps soft0's own port: InfiniBand
	// with LID 1 and a GID, connected by QP number alone. Real devices ignore it.
	SoftLinkLayer LinkLayer
}

// ibvProvider is set by the cgo build; without cgo only soft exists.
var ibvProvider provider

// sysfs is where real devices are described. Tests read fake trees through
// the same reader, handing it their own fs.FS.
var sysfs fs.FS = os.DirFS("/sys")

// Devices lists every device: the real ones that libibverbs reports, then
// soft0. A host without RDMA support (no kernel modules, no libibverbs
// devices) simply lists soft0.
func Devices() ([]DeviceInfo, error) {
	var out []DeviceInfo
	if ibvProvider != nil {
		devs, err := ibvProvider.devices(sysfs)
		if err != nil && !errors.Is(err, ErrNoDevice) && !errors.Is(err, ErrNotSupported) {
			return nil, err
		}
		out = append(out, devs...)
	}
	return append(out, softInfo()), nil
}

// Open opens a device by name with the automatic choices of the zero
// Options: a real device (e.g. "mlx5_0", "rxe0") or "soft0". The name ""
// picks the first real device with an active port, else soft0; it does
// not consult the environment (see DeviceEnv).
func Open(name string) (*Context, error) {
	c, err := openContext(name, Options{})
	if err != nil {
		return nil, err
	}
	c.register("context", 0)
	return c, nil
}

// OpenWith opens a device by name, as Open does, with the choices of o.
func OpenWith(name string, o Options) (*Context, error) {
	c, err := openContext(name, o)
	if err != nil {
		return nil, err
	}
	c.register("context", 0)
	return c, nil
}

// openContext is Open and OpenWith, but for the leak registry: each registers
// the context itself, so that a leak report names its caller.
func openContext(name string, o Options) (*Context, error) {
	if o.GIDIndex > maxGIDIndex {
		return nil, invalid("Open", "Options.GIDIndex %d exceeds %d, the largest GID index", o.GIDIndex, maxGIDIndex)
	}
	if o.TrafficClass < 0 || o.TrafficClass > 255 {
		return nil, invalid("Open", "Options.TrafficClass %d is not from 0 to 255", o.TrafficClass)
	}
	if o.ServiceLevel < 0 || o.ServiceLevel > 15 {
		return nil, invalid("Open", "Options.ServiceLevel %d is not from 0 to 15", o.ServiceLevel)
	}
	if o.PKeyIndex < 0 || o.PKeyIndex > 0xffff {
		return nil, invalid("Open", "Options.PKeyIndex %d is not from 0 to 65535", o.PKeyIndex)
	}
	if name == "" {
		devs, err := Devices()
		if err != nil {
			return nil, err
		}
		name = SoftDeviceName
		for _, d := range devs {
			if d.Provider == "ibv" && d.Active() {
				name = d.Name
				break
			}
		}
	}
	var (
		b    ctxBackend
		info DeviceInfo
		err  error
	)
	switch {
	case name == SoftDeviceName:
		b, info, err = softProvider{}.open(name, o)
	case ibvProvider != nil:
		b, info, err = ibvProvider.open(name, o)
	default:
		err = newError("Open", ErrNoDevice, fmt.Sprintf("device %q: this build has no libibverbs support (built without cgo); only %s exists", name, SoftDeviceName))
	}
	if err != nil {
		return nil, err
	}
	attr, err := b.query()
	if err != nil {
		_ = b.close()
		return nil, err
	}
	return &Context{info: info, attr: attr, b: b, port: b.portNum()}, nil
}
