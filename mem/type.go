package mem

import (
	"fmt"
	"strings"

	"github.com/ibcoll/ibcoll/internal/errs"
)

// Type is the kind of memory behind a buffer or an address.
type Type uint8

const (
	// Host is ordinary CPU memory.
	Host Type = iota
	// CUDA is device memory from cuMemAlloc; the CPU cannot touch it.
	CUDA
	// CUDAManaged is unified memory from cuMemAllocManaged, reachable from
	// both the CPU and the GPU.
	CUDAManaged
	// DM is NIC device memory, reachable only through copies (see Region).
	DM
	// Sim is simulated device memory for machines with no GPU: its address
	// faults on any CPU access, so code that forgets to stage it is caught.
	Sim
)

var typeNames = [...]string{
	Host:        "host",
	CUDA:        "cuda",
	CUDAManaged: "cuda-managed",
	DM:          "dm",
	Sim:         "sim",
}

// String returns the name that ParseType accepts.
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// ParseType is the inverse of Type.String.
func ParseType(s string) (Type, error) {
	for t, name := range typeNames {
		if s == name {
			return Type(t), nil
		}
	}
	return 0, fmt.Errorf("mem: unknown memory type %q (valid: %s): %w",
		s, strings.Join(typeNames[:], ", "), ErrInvalid)
}

var (
	// ErrNotSupported is wrapped by errors for memory types or copies that
	// this process cannot provide: CUDA without libcuda or a device, a build
	// without cgo, a copy no path can carry.
	ErrNotSupported = errs.ErrNotSupported
	// ErrInvalid is wrapped by errors for bad arguments: sizes, offsets,
	// closed or nil buffers, unknown names.
	ErrInvalid = errs.ErrInvalid
	// ErrBusy is wrapped by UseCUDADevice when CUDA already uses another device.
	ErrBusy = errs.ErrBusy
)

func isCUDA(t Type) bool { return t == CUDA || t == CUDAManaged }
