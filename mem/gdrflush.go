package mem

import (
	"sync"
	"sync/atomic"
)

// GPUDirectOrdering is how the CUDA device orders the writes that a NIC makes into its
// memory by GPUDirect RDMA, for work on the GPU that owns the memory: whether a kernel
// launched after the CPU saw the NIC's completion is sure to read the data, or
// whether the writes must be flushed first.
type GPUDirectOrdering struct {
	// Ordering is CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: 0 (none: the
	// writes must be flushed), 100 (ordered for the owner), 200 (for all devices);
	// -1 where the driver has no such attribute (before CUDA 11.3).
	Ordering int
	// CanFlush: the host can flush them (cuFlushGPUDirectRDMAWrites, and the device's
	// CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS has its host bit).
	CanFlush bool
}

// NeedsFlush reports whether completed GPUDirect writes must be flushed before the
// owning GPU's work reads them.
func (o GPUDirectOrdering) NeedsFlush() bool { return o.Ordering == 0 }

var gdr struct {
	once    sync.Once
	o       GPUDirectOrdering
	err     error
	flushes atomic.Uint64
}

// GPUDirectWriteOrdering reads the CUDA device's GPUDirect write ordering, once per
// process. It fails where CUDA is not available.
func GPUDirectWriteOrdering() (GPUDirectOrdering, error) {
	if err := cudaInit(); err != nil {
		return GPUDirectOrdering{Ordering: -1}, err
	}
	gdr.once.Do(func() { gdr.o, gdr.err = cudaGDRInfo() })
	return gdr.o, gdr.err
}

// FlushGPUDirectWrites makes the GPUDirect RDMA writes that the NIC has completed so
// far visible to work on the GPU that owns the memory, where the device needs it
// (NeedsFlush) and the host can (CanFlush); elsewhere it does nothing. A transport
// calls it after the last receive of a collective into CUDA memory that the NIC wrote
// directly, before it reports the collective done. Where a flush is needed and the
// host cannot make one, it does nothing either: such a GPU orders nothing for the
// NIC, and no host call can (docs/design.md, "On real mlx5 hardware").
func FlushGPUDirectWrites() error {
	o, err := GPUDirectWriteOrdering()
	if err != nil || !o.NeedsFlush() || !o.CanFlush {
		return nil
	}
	return gdrFlush()
}

// gdrFlush flushes, whatever the ordering says, and counts it.
func gdrFlush() error {
	if err := cudaGDRFlush(); err != nil {
		return err
	}
	gdr.flushes.Add(1)
	return nil
}

// GPUDirectFlushes counts the flushes FlushGPUDirectWrites made in this process.
func GPUDirectFlushes() uint64 { return gdr.flushes.Load() }
