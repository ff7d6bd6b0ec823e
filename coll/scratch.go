package coll

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/ibcoll/ibcoll/asym"
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
// And it keeps each buffer's registration with the transport for as long as it keeps
// the buffer: registering and deregistering a scratch at every non-persistent
// collective cost each rank 5-10 µs in the median and 135-150 µs at the 90th
// percentile (8 ranks of an H200 machine staging a 64 KiB CUDA source at once,
// traced), and on a real NIC a registration pins pages. The registration still goes
// first: a buffer the cache does not keep, or drops, is deregistered before it is
// freed, and Team.Close deregisters every kept one (dropRegs) before the transport
// closes. The transport may keep closed tasks built on a kept buffer, for the next
// Init that gets it (tlmlx5's task cache); closing the registration releases them
// first.
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
	left    []*mem.Buffer // big buffers replaced whose release failed: close tries again
	streams []*mem.Stream
	regs    map[*mem.Buffer]io.Closer // the transport's registration of each buffer that has one
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

// register returns the registration of scratch b through r, made once per buffer and
// kept with it (see scratchCache); closing what it returns does nothing, since free
// decides when the registration goes. DM scratch is never kept, so its registration is
// the transport's own.
func (c *scratchCache) register(r asym.Registrar, b *mem.Buffer) (io.Closer, error) {
	if b.Type() == mem.DM {
		return r.Register(b)
	}
	c.mu.Lock()
	reg := c.regs[b]
	c.mu.Unlock()
	if reg == nil {
		var err error
		if reg, err = r.Register(b); err != nil {
			return nil, err
		}
		if wrapScratchReg != nil {
			reg = wrapScratchReg(reg)
		}
		c.mu.Lock()
		if c.regs == nil {
			c.regs = map[*mem.Buffer]io.Closer{}
		}
		c.regs[b] = reg
		c.mu.Unlock()
	}
	return keptReg{}, nil
}

// wrapScratchReg is a variable only for tests (export_test.go): it wraps each scratch
// registration the cache keeps, so that a test can make its release fail.
var wrapScratchReg func(io.Closer) io.Closer

// keptReg is a scratch registration that stays with its buffer in the cache.
type keptReg struct{}

func (keptReg) Close() error { return nil }

// release deregisters b, if it has a registration, and then closes it. A failed
// deregistration keeps both, so that the stage's retry tries again instead of freeing
// memory the NIC may still reach.
func (c *scratchCache) release(b *mem.Buffer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.releaseLocked(b)
}

// dropRegs deregisters every kept buffer; the buffers stay, for close to free. Team.Close
// calls it while the transport is still open.
// One that fails stays, for the next Close to retry.
func (c *scratchCache) dropRegs() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for b, reg := range c.regs {
		if err := reg.Close(); err != nil {
			errs = append(errs, fmt.Errorf("deregister %v scratch of %d bytes: %w", b.Type(), b.Len(), err))
			continue
		}
		delete(c.regs, b)
	}
	return errors.Join(errs...)
}

func (c *scratchCache) free(b *mem.Buffer) error {
	c.mu.Lock()
	if c.idle != nil && c.bytes+b.Len() > c.limit && c.limit >= 0 && b.Pinned() {
		old := c.big
		c.big = b
		c.mu.Unlock()
		if old == nil || old == b {
			return nil
		}
		// old's failure is not b's, which is kept: were it returned, the caller would
		// free b again while it is c.big.
		if err := c.release(old); err != nil {
			c.mu.Lock()
			c.left = append(c.left, old)
			c.mu.Unlock()
		}
		return nil
	}
	if c.idle == nil || c.bytes+b.Len() > c.limit || b.Type() == mem.DM {
		c.mu.Unlock()
		return c.release(b)
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
			errs = append(errs, c.releaseLocked(b))
		}
	}
	if c.big != nil {
		errs = append(errs, c.releaseLocked(c.big))
	}
	for _, b := range c.left {
		errs = append(errs, c.releaseLocked(b))
	}
	c.left = nil
	for _, s := range c.streams {
		errs = append(errs, s.Close())
	}
	c.idle, c.bytes, c.big, c.streams = nil, 0, nil, nil
	return errors.Join(errs...)
}

// releaseLocked is release with c.mu held.
func (c *scratchCache) releaseLocked(b *mem.Buffer) error {
	if reg := c.regs[b]; reg != nil {
		if err := reg.Close(); err != nil {
			return fmt.Errorf("deregister %v scratch of %d bytes: %w", b.Type(), b.Len(), err)
		}
		delete(c.regs, b)
	}
	return b.Close()
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
