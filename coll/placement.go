package coll

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/topology"
)

// Placement is what NewContext chose for a context's device and CUDA device, and
// why (Context.Placement).
type Placement struct {
	// Device is the device asked of the transport: Config.Device, the HCA nearest
	// to the local rank's GPU, or "" (the transport's default: the first real
	// device with an active port, else soft0).
	Device string
	// DeviceFrom says which: "Config.Device", "topology" or "default".
	DeviceFrom string
	// Opened is the device the transport opened ("mlx5_0", "rxe0", "soft0"): what
	// Device asked for, or what the default chose. Empty where no transport says.
	Opened string
	// GPU is the NVML index of the local rank's GPU (-1: none known), GPUPCI its
	// PCI address, Relation its relation to the device (PIX, PXB, ...) when the
	// topology chose the device.
	GPU      int
	GPUPCI   string
	Relation string
	// CUDADevice is the ordinal CUDA memory of this process uses, as far as this
	// context knows: Config.CUDADevice, or the local rank's GPU.
	CUDADevice int
	// Note says what the topology could not see, or why its choice was not taken.
	Note string
}

// discovered is the node's topology, read once per process: it does not
// change while the process runs, and NVML is slow to initialize.
// Tests replace it, and useCUDADevice, to place on mock machines.
var discovered = sync.OnceValues(func() (*topology.Topology, error) {
	return topology.Discover(topology.Options{})
})

var useCUDADevice = mem.UseCUDADevice

// place completes cfg from the node's topology (see Config.LocalRank): the HCA
// nearest to the local rank's GPU when no device is named and a GPU is there,
// and that GPU as the process's CUDA device when none was named.
func place(cfg *Config) Placement {
	p := Placement{Device: cfg.Device, DeviceFrom: "default", GPU: -1, CUDADevice: cfg.CUDADevice}
	if cfg.Device != "" {
		p.DeviceFrom = "Config.Device"
	}
	tp, note := localPlace(cfg)
	p.Note = note
	if tp == nil || tp.GPU < 0 {
		return p // no GPU: the transport's default, as before
	}
	p.GPU, p.GPUPCI = tp.GPU, tp.GPUPCI
	if cfg.Device == "" && tp.HCA != "" {
		cfg.Device = tp.HCA
		p.Device, p.DeviceFrom, p.Relation = tp.HCA, "topology", tp.Relation.String()
	}
	if cfg.CUDADevice == 0 && !cfg.cudaDeviceSet && tp.CUDAOrdinal > 0 {
		// Device 0 is the process's default already; another is fixed now,
		// unless the process uses one (goroutine ranks share a CUDA device).
		if err := useCUDADevice(tp.CUDAOrdinal); err != nil {
			if !errors.Is(err, ErrBusy) {
				p.Note = joinNote(p.Note, err.Error())
			} else {
				p.Note = joinNote(p.Note, fmt.Sprintf("local rank %d's GPU is CUDA device %d, but this process already uses another", cfg.LocalRank, tp.CUDAOrdinal))
			}
			return p
		}
		p.CUDADevice = tp.CUDAOrdinal
	}
	return p
}

// localPlace is the topology's placement of cfg's local rank, or nil with why not.
func localPlace(cfg *Config) (*topology.Placement, string) {
	if cfg.NoPlacement {
		return nil, ""
	}
	topo, err := discovered()
	if err != nil {
		return nil, err.Error()
	}
	tp, err := topo.Place(cfg.LocalRank, cfg.CUDAVisibleDevices)
	if err != nil {
		return nil, err.Error()
	}
	return &tp, tp.Note
}

// PlacedDevice is the device NewContext opens for cfg: Config.Device, else the HCA
// nearest to the local rank's GPU, else "" (the transport's default). It opens nothing
// and selects no CUDA device, so that a tool can name the device before it makes the
// context.
func PlacedDevice(cfg Config) string {
	if cfg.Device != "" {
		return cfg.Device
	}
	if tp, _ := localPlace(&cfg); tp != nil && tp.GPU >= 0 {
		return tp.HCA
	}
	return ""
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Placement says which device and CUDA device NewContext chose, and why.
func (c *Context) Placement() Placement {
	if c == nil {
		return Placement{GPU: -1}
	}
	return c.place
}
