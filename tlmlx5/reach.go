package tlmlx5

import (
	"fmt"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// probeSize is one page: enough for the kernel to pin and map, so a
// success means the peer-memory path (nvidia-peermem) really works.
const probeSize = 64 << 10

// probeReach finds what this transport registers directly for user buffers, by trying
// rather than assuming, the same way on every device:
//   - host memory always;
//   - NIC device memory is added by Open (addPoolReach) when the context's pool
//     is device memory: DM buffers of that pool are used through its MR;
//   - CUDA managed and CUDA device memory when registering a real allocation
//     succeeds, through whichever path verbs' registration takes: ibv_reg_mr (a
//     NIC with a peer-memory client such as nvidia-peermem), else the allocation
//     exported as a dma-buf and registered with ibv_reg_dmabuf_mr, or soft0's
//     GPUDirect stand-in for device memory (soft0 takes managed memory, which the
//     CPU reaches); the reach's notes name the path (MR.Via);
//   - sim never: it stands for device memory the NIC cannot reach.
//
// A type the NIC registers is used in place. The transport's own copies of it go
// through mem's copies; its reductions run on the CPU, so a reduction takes in place
// only what the CPU reaches too (host and managed memory), and the plan stages the
// rest. probeReach allocates and frees a small buffer of each GPU type when CUDA is
// present.
func probeReach(pd *verbs.PD) (mem.Reach, []*probeLeft, error) {
	if pd == nil {
		return mem.Reach{}, nil, fmt.Errorf("tlmlx5: probe reach: pd is nil: %w", mem.ErrInvalid)
	}
	r := mem.Reach{
		NIC: []mem.Type{mem.Host},
		CPU: []mem.Type{mem.Host, mem.CUDAManaged},
		// Each buffer is registered on its own, and the local copies between src and
		// dst go through mem, so mixed types need no staging of their own.
		Mixed: true,
		Notes: []string{"host: registered directly", "sim: never registrable (simulated device memory)"},
	}
	if !mem.CUDAAvailable() {
		r.Notes = append(r.Notes, "cuda, cuda-managed: no CUDA device, not probed")
		return r, nil, nil
	}
	var lefts []*probeLeft
	for _, t := range []mem.Type{mem.CUDAManaged, mem.CUDA} {
		via, left, err := probeRegister(pd, t)
		if left != nil {
			lefts = append(lefts, left)
			r.Notes = append(r.Notes, fmt.Sprintf("%s: the probe's release failed, retried when the context closes", t))
		}
		if err != nil {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: registration refused (%v): staged through host", t, err))
			continue
		}
		r.NIC = append(r.NIC, t)
		r.Notes = append(r.Notes, fmt.Sprintf("%s: registered directly through %s (GPUDirect RDMA)", t, via))
	}
	return r, lefts, nil
}

// probeRegister registers a buffer of type t as user buffers are and says
// through which path it went: ibv_reg_mr (a peer-memory module, or host
// memory), ibv_reg_dmabuf_mr (the CUDA driver's dma-buf export, which verbs
// tries when ibv_reg_mr refuses device memory), or soft0's stand-in.
// What the probe could not release comes back in left, for the context's Close to
// release before the PD's (memory is never freed under a registration).
func probeRegister(pd *verbs.PD, t mem.Type) (via string, left *probeLeft, err error) {
	b, err := mem.Alloc(t, probeSize)
	if err != nil {
		return "", nil, err
	}
	mr, err := pd.RegMRAddr(b.Addr(), b.Len(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		left = &probeLeft{b: b}
		return "", left.keep(), err
	}
	left = &probeLeft{mr: mr, b: b}
	return mr.Via(), left.keep(), nil
}

// probeLeft is a probe's registration and buffer that are not released yet.
type probeLeft struct {
	mr *verbs.MR
	b  *mem.Buffer
}

// Close releases what is left, the registration first; a failure keeps the rest for
// another try.
func (p *probeLeft) Close() error {
	if p.mr != nil {
		if err := p.mr.Close(); err != nil {
			return fmt.Errorf("deregistering a reach probe: %w", err)
		}
		p.mr = nil
	}
	if p.b != nil {
		if err := p.b.Close(); err != nil {
			return fmt.Errorf("freeing a reach probe: %w", err)
		}
		p.b = nil
	}
	return nil
}

// keep releases what it can now, and returns p where something is left, else nil.
func (p *probeLeft) keep() *probeLeft {
	if p.Close() != nil {
		return p
	}
	return nil
}
