package coll

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
)

// scratchCache keeps the staging buffers of closed requests for the next
// request of the same memory type and size. Without it every
// non-persistent staged collective pays a fresh allocation (an mmap and
// a page fault per page for host memory, cuMemAlloc for CUDA) at Init. A
// buffer comes back only after asym deregistered it and the request's
// post has settled, so no peer or NIC can still reach it; it is freed for
// good at Team.Close.
//
// DM scratch comes from the transport's device-memory pool (dm), and is never
// kept: device memory is scarce and shared by every team of the context.
type scratchCache struct {
	dm    driver.DMAllocator // nil: the transport has none
	mu    sync.Mutex
	idle  map[scratchKey][]*mem.Buffer
	bytes int
	limit int // Config.ScratchCache
}

type scratchKey struct {
	t mem.Type
	n int
}

func (c *scratchCache) alloc(t mem.Type, n int) (*mem.Buffer, error) {
	if t == mem.DM {
		if c.dm == nil {
			return nil, fmt.Errorf("coll: DM scratch: the transport has no device memory: %w", ErrNotSupported)
		}
		return c.dm.AllocDM(n)
	}
	c.mu.Lock()
	k := scratchKey{t, n}
	if bufs := c.idle[k]; len(bufs) > 0 {
		b := bufs[len(bufs)-1]
		c.idle[k] = bufs[:len(bufs)-1]
		c.bytes -= n
		c.mu.Unlock()
		return b, nil
	}
	c.mu.Unlock()
	return mem.Alloc(t, n)
}

func (c *scratchCache) free(b *mem.Buffer) error {
	c.mu.Lock()
	if c.idle == nil || c.bytes+b.Len() > c.limit || b.Type() == mem.DM {
		c.mu.Unlock()
		return b.Close()
	}
	k := scratchKey{b.Type(), b.Len()}
	c.idle[k] = append(c.idle[k], b)
	c.bytes += b.Len()
	c.mu.Unlock()
	return nil
}

// close frees every idle buffer; later frees close at once.
func (c *scratchCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, bufs := range c.idle {
		for _, b := range bufs {
			errs = append(errs, b.Close())
		}
	}
	c.idle, c.bytes = nil, 0
	return errors.Join(errs...)
}
