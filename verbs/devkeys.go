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
	keys atomic.Pointer[map[uint32]int] // key → MRs holding it
}

// add lists lkey; remove unlists it once as often as it was added, so that a new MR
// that got a key a closing one just gave up (a device may reuse keys at once) is not
// unlisted by the old one's removal.
func (d *devKeys) add(lkey uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	next := map[uint32]int{}
	if cur := d.keys.Load(); cur != nil {
		for k, n := range *cur {
			next[k] = n
		}
	}
	next[lkey]++
	d.keys.Store(&next)
}

func (d *devKeys) remove(lkey uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := d.keys.Load()
	if cur == nil {
		return
	}
	next := make(map[uint32]int, len(*cur))
	for k, n := range *cur {
		next[k] = n
	}
	if next[lkey]--; next[lkey] <= 0 {
		delete(next, lkey)
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
