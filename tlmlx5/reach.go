package tlmlx5

import (
	"errors"
	"fmt"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// probeSize is one page: enough for the kernel to pin and map, so a
// success means the peer-memory path (nvidia-peermem) really works.
const probeSize = 64 << 10

// probeReach finds what this transport registers directly for user buffers, by trying
// rather than assuming:
//   - host memory always;
//   - NIC device memory is added by Open (addPoolReach) when the context's pool
//     is device memory: DM buffers of that pool are used through its MR;
//   - CUDA managed memory when registering a real allocation succeeds
//     (GPUDirect RDMA through nvidia-peermem; the dma-buf path is not
//     probed); the transport then uses it in place, since the CPU reaches it
//     too;
//   - CUDA device memory never, yet: the transport's local copies and
//     reductions run on the CPU;
//   - sim never: it stands for device memory the NIC cannot reach.
//
// On soft0 the "NIC" is the CPU, so it reaches host and managed memory and
// never CUDA device memory.
//
// The CPU reaches host and managed memory only. probeReach allocates and frees
// a small buffer of each GPU type when CUDA is present.
func probeReach(pd *verbs.PD) (mem.Reach, error) {
	if pd == nil {
		return mem.Reach{}, fmt.Errorf("tlmlx5: probe reach: pd is nil: %w", mem.ErrInvalid)
	}
	r := mem.Reach{
		NIC:   []mem.Type{mem.Host},
		CPU:   []mem.Type{mem.Host, mem.CUDAManaged},
		Notes: []string{"host: registered directly", "sim: never registrable (simulated device memory)"},
	}
	if pd.Context().Provider() == "soft" {
		// soft0 is the CPU: it reaches what the CPU reaches, and its
		// registration cannot tell device pointers from host ones.
		r.NIC = append(r.NIC, mem.CUDAManaged)
		r.Notes = append(r.Notes, "cuda-managed: soft0 reaches CPU-accessible memory", "cuda: soft0 cannot reach device memory")
		return r, nil
	}
	if !mem.CUDAAvailable() {
		r.Notes = append(r.Notes, "cuda: no CUDA device, not probed")
		return r, nil
	}
	// CUDA device memory stays staged even where the NIC registers it: the
	// transport's local copies and reductions run on the CPU, which cannot touch
	// it. Managed memory the CPU reaches, so registering it is all it needs.
	r.Notes = append(r.Notes, "cuda: staged through host (the transport's local copies and reductions run on the CPU)")
	for _, t := range []mem.Type{mem.CUDAManaged} {
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

func probeRegister(pd *verbs.PD, t mem.Type) (bool, error) {
	b, err := mem.Alloc(t, probeSize)
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
