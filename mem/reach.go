package mem

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ibcoll/ibcoll/verbs"
)

// Reach says which memory types a NIC can register directly and which the
// CPU can load and store (reductions run on the CPU, so they need both).
type Reach struct {
	NIC []Type
	CPU []Type
	// Notes explains each decision, for logs and tool headers.
	Notes []string
}

// NICReaches reports whether the NIC can register memory of type t.
func (r Reach) NICReaches(t Type) bool { return has(r.NIC, t) }

// CPUReaches reports whether the CPU can access memory of type t.
func (r Reach) CPUReaches(t Type) bool { return has(r.CPU, t) }

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
	return fmt.Sprintf("nic=%s cpu=%s", names(r.NIC), names(r.CPU))
}

// probeSize is one page: enough for the kernel to pin and map, so a
// success means the peer-memory path (nvidia-peermem) really works.
const probeSize = 64 << 10

// Probe finds what pd's NIC can register, by trying rather than assuming:
//   - host memory always;
//   - NIC device memory always, through its own (zero-based) MR;
//   - CUDA and CUDA managed memory only when registering a real allocation
//     of that type succeeds (GPUDirect RDMA through nvidia-peermem); the
//     dma-buf path is not probed, so without peermem CUDA memory is staged;
//   - sim never: it stands for device memory the NIC cannot reach.
//
// On soft0 the "NIC" is the CPU, so it reaches host, managed and DM memory
// and never CUDA device memory.
//
// The CPU reaches host and managed memory only. Probe allocates and frees
// a small buffer of each GPU type when CUDA is present.
func Probe(pd *verbs.PD) (Reach, error) {
	if pd == nil {
		return Reach{}, fmt.Errorf("mem: Probe: pd is nil: %w", ErrInvalid)
	}
	r := Reach{
		NIC:   []Type{Host, DM},
		CPU:   []Type{Host, CUDAManaged},
		Notes: []string{"host: registered directly", "dm: through its zero-based MR", "sim: never registrable (simulated device memory)"},
	}
	if pd.Context().Provider() == "soft" {
		// soft0 is the CPU: it reaches what the CPU reaches, and its
		// registration cannot tell device pointers from host ones.
		r.NIC = append(r.NIC, CUDAManaged)
		r.Notes = append(r.Notes, "cuda-managed: soft0 reaches CPU-accessible memory", "cuda: soft0 cannot reach device memory")
		return r, nil
	}
	if !CUDAAvailable() {
		r.Notes = append(r.Notes, "cuda: no CUDA device, not probed")
		return r, nil
	}
	for _, t := range []Type{CUDA, CUDAManaged} {
		ok, err := probeRegister(pd, t)
		switch {
		case err != nil:
			r.Notes = append(r.Notes, fmt.Sprintf("%s: registration refused (%v): staged through host", t, err))
		case ok:
			r.NIC = append(r.NIC, t)
			r.Notes = append(r.Notes, fmt.Sprintf("%s: registered directly (GPUDirect RDMA)", t))
		}
	}
	return r, nil
}

func probeRegister(pd *verbs.PD, t Type) (bool, error) {
	b, err := Alloc(t, probeSize)
	if err != nil {
		return false, err
	}
	defer b.Close()
	mr, err := pd.RegMRAddr(b.Addr(), b.Len(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		return false, err
	}
	return true, errors.Join(mr.Close())
}
