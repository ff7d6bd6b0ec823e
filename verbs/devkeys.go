package verbs

import (
	"sync"
	"sync/atomic"
)

// devKeys is the set of a PD's local keys whose addresses the CPU cannot use: DM MRs
// (zero-based: an address is an offset into device memory) and dma-buf MRs (GPU
// memory). A receive or an inline send must not name them. mlx5's library copies a
// small send into the receive buffer with memcpy while polling (scatter to CQE, on by
// default), and an inline send's payload is read with memcpy at post time; either
// would dereference an offset or a device address and kill the process
// (mlx5dv_create_qp(3): "When device memory is used IBV_SEND_INLINE and scatter to CQE
// should not be used, as the memcpy is not possible"). The hot paths read the set
// with one atomic load; registrations copy it on write.
type devKeys struct {
	mu   sync.Mutex
	keys atomic.Pointer[map[uint32]struct{}]
}

func (d *devKeys) add(lkey uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := map[uint32]struct{}{lkey: {}}
	if cur := d.keys.Load(); cur != nil {
		for k := range *cur {
			next[k] = struct{}{}
		}
	}
	d.keys.Store(&next)
}

func (d *devKeys) remove(lkey uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := d.keys.Load()
	if cur == nil {
		return
	}
	next := make(map[uint32]struct{}, len(*cur))
	for k := range *cur {
		if k != lkey {
			next[k] = struct{}{}
		}
	}
	d.keys.Store(&next)
}

// has reports whether lkey is a key of device memory.
func (d *devKeys) has(lkey uint32) bool {
	cur := d.keys.Load()
	if cur == nil || len(*cur) == 0 {
		return false
	}
	_, ok := (*cur)[lkey]
	return ok
}
