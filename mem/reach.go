package mem

import (
	"fmt"
	"slices"
	"strings"
)

// Reach says which memory types a transport's NIC registers directly and which the
// CPU can load and store (reductions run on the CPU, so they need both). Anything else
// is staged through host memory. It is the one reach type of the library: transports
// report it, asym plans from it.
type Reach struct {
	NIC []Type
	CPU []Type
	// Mixed says that the transport takes a source and a destination of different
	// reachable types in one collective (it registers each buffer on its own and
	// copies between types through mem). Without it, the seed's rule holds: a rank
	// whose two buffers differ in type stages one of them to the other's type.
	Mixed bool
	// ReduceSrc lists the types that a reduction takes as its source (read only)
	// although the CPU does not reach them: the transport copies such a source into
	// its own host memory at every post, as the first step of the collective (for
	// device memory whose CPU reads are uncached loads, through the NIC). An in-place
	// buffer, which the reduction also writes, is not covered, and neither is a
	// transport without Mixed.
	ReduceSrc []Type
	// Notes explains each decision, for logs and tool headers.
	Notes []string
}

// NICReaches reports whether the NIC can register memory of type t. Host memory is
// always reachable, listed or not.
func (r Reach) NICReaches(t Type) bool { return t == Host || has(r.NIC, t) }

// CPUReaches reports whether the CPU can access memory of type t. Host memory is
// always reachable, listed or not.
func (r Reach) CPUReaches(t Type) bool { return t == Host || has(r.CPU, t) }

// ReducesFrom reports whether the transport's reductions take a source of type t: the
// NIC registers it and either the CPU reaches it or the transport copies it in itself
// (ReduceSrc). asym leaves such a source unstaged only where Mixed is set too.
func (r Reach) ReducesFrom(t Type) bool {
	return r.NICReaches(t) && (r.CPUReaches(t) || has(r.ReduceSrc, t))
}

// DefaultReach is the reach of a node without GPUDirect: the NIC registers host memory
// and its device memory, the CPU reaches host and CUDA managed memory.
func DefaultReach() Reach {
	return Reach{NIC: []Type{Host, DM}, CPU: []Type{Host, CUDAManaged}}
}

// AllReachable is a reach in which every memory type is registrable and CPU-accessible:
// under it staging happens for asymmetry only.
func AllReachable() Reach {
	all := []Type{Host, CUDA, CUDAManaged, DM, Sim}
	return Reach{NIC: all, CPU: slices.Clone(all)}
}

func has(ts []Type, t Type) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func (r Reach) String() string {
	names := func(ts []Type) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.String())
		}
		return strings.Join(s, ",")
	}
	s := fmt.Sprintf("nic=%s cpu=%s", names(r.NIC), names(r.CPU))
	if len(r.ReduceSrc) > 0 {
		s += " reduce-src=" + names(r.ReduceSrc)
	}
	if r.Mixed {
		s += " mixed"
	}
	return s
}
