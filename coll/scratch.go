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
// A pinned buffer (host scratch beside CUDA memory) that does not fit under the limit
// is still kept, alone, as big: pinning costs far more than the copy it speeds up
// (about 0.2 ms per MiB), so a run of same-shaped large collectives must not pin at
// every Init. The cache thus holds at most the limit plus one pinned buffer.
//
// It also keeps the copy streams that staging uses, so that a post does not create
// and destroy a CUDA stream.
//
// DM scratch comes from the transport's device-memory pool (dm), and is never
// kept: device memory is scarce and shared by every team of the context.
type scratchCache struct {
	dm      driver.DMAllocator // nil: the transport has none
	mu      sync.Mutex
	idle    map[scratchKey][]*mem.Buffer
	bytes   int
	limit   int // Config.ScratchCache
	big     *mem.Buffer
	streams []*mem.Stream
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
	if b := c.big; b != nil && b.Type() == t && b.Len() == n {
		c.big = nil
		c.mu.Unlock()
		return b, nil
	}
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
	if c.idle != nil && c.bytes+b.Len() > c.limit && c.limit >= 0 && b.Pinned() {
		old := c.big
		c.big = b
		c.mu.Unlock()
		return old.Close()
	}
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
	errs = append(errs, c.big.Close())
	for _, s := range c.streams {
		errs = append(errs, s.Close())
	}
	c.idle, c.bytes, c.big, c.streams = nil, 0, nil, nil
	return errors.Join(errs...)
}

// stream hands out a copy stream, a kept one when there is one.
func (c *scratchCache) stream() (*mem.Stream, error) {
	c.mu.Lock()
	if n := len(c.streams); n > 0 {
		s := c.streams[n-1]
		c.streams = c.streams[:n-1]
		c.mu.Unlock()
		return s, nil
	}
	c.mu.Unlock()
	return mem.NewStream()
}

// putStream takes back a stream whose copies are done; after close it is closed.
func (c *scratchCache) putStream(s *mem.Stream) error {
	c.mu.Lock()
	if c.idle == nil {
		c.mu.Unlock()
		return s.Close()
	}
	c.streams = append(c.streams, s)
	c.mu.Unlock()
	return nil
}
