package dm

import (
	"fmt"
	"sync"

	"github.com/ibcoll/ibcoll/verbs"
)

// Chunk is an aligned piece of a pool. It implements mem.Region. Its
// copies are safe for concurrent use with each other; Close waits for
// copies in flight.
type Chunk struct {
	pool     *Pool
	off      int // offset in the pool, a multiple of the pool's Align
	n        int // bytes asked for
	reserved int // bytes taken from the pool: n rounded up to Align

	mu     sync.RWMutex
	closed bool
	sealed bool // Close refuses: the chunk closes through the func Seal returned
}

// The getters of a nil or zero Chunk (one no pool made) return zero values, as
// its Close and copies refuse: none panics.

// made reports whether c came from a pool.
func (c *Chunk) made() bool { return c != nil && c.pool != nil }

// Offset is the chunk's offset in its pool. For a DM pool this is also
// its address in the zero-based MR; in general the MR address is Addr.
func (c *Chunk) Offset() int {
	if !c.made() {
		return 0
	}
	return c.off
}

// Len is the chunk's size as asked for at allocation.
func (c *Chunk) Len() int {
	if !c.made() {
		return 0
	}
	return c.n
}

// Addr is the chunk's first address in the pool's MR, for SGEs and for
// peers' RDMA: the offset for a DM pool (zero-based MR), the virtual
// address for a host pool. It always equals Pool.MR().Addr() + Offset().
func (c *Chunk) Addr() uint64 {
	if !c.made() {
		return 0
	}
	return c.pool.mr.Addr() + uint64(c.off)
}

// LKey is the local key of the pool's MR.
func (c *Chunk) LKey() uint32 {
	if !c.made() {
		return 0
	}
	return c.pool.mr.LKey()
}

// RKey is the remote key of the pool's MR.
func (c *Chunk) RKey() uint32 {
	if !c.made() {
		return 0
	}
	return c.pool.mr.RKey()
}

// Pool returns the pool the chunk came from (nil for a nil or zero Chunk).
func (c *Chunk) Pool() *Pool {
	if c == nil {
		return nil
	}
	return c.pool
}

// CopyTo copies src into the chunk at offset off. Any offset and length
// are allowed: device memory is written in 4-byte words, so partial words
// at either end are read, patched and written back (ibv_memcpy_from_dm(3),
// ibv_memcpy_to_dm(3)), and the aligned middle is copied directly.
func (c *Chunk) CopyTo(off int, src []byte) error {
	const op = "Chunk.CopyTo"
	if err := c.checkRange(op, off, len(src), "src"); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return fmt.Errorf("dm: %s: chunk is closed: %w", op, verbs.ErrClosed)
	}
	if len(src) == 0 {
		return nil
	}
	p := c.pool
	if p.kind == KindHost {
		copy(p.host[c.off+off:], src)
		return nil
	}
	if err := p.writeDM(c.off+off, src); err != nil {
		return fmt.Errorf("dm: %s: %w", op, err)
	}
	return nil
}

// CopyFrom copies len(dst) bytes of the chunk at offset off into dst, with
// any offset and length, like CopyTo.
func (c *Chunk) CopyFrom(dst []byte, off int) error {
	const op = "Chunk.CopyFrom"
	if err := c.checkRange(op, off, len(dst), "dst"); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return fmt.Errorf("dm: %s: chunk is closed: %w", op, verbs.ErrClosed)
	}
	if len(dst) == 0 {
		return nil
	}
	p := c.pool
	if p.kind == KindHost {
		copy(dst, p.host[c.off+off:])
		return nil
	}
	if err := p.readDM(dst, c.off+off); err != nil {
		return fmt.Errorf("dm: %s: %w", op, err)
	}
	return nil
}

func (c *Chunk) checkRange(op string, off, n int, buf string) error {
	switch {
	case c == nil:
		return invalidArg(op, "nil Chunk")
	case off < 0 || off > c.n:
		return invalidArg(op, "off %d is outside the %d-byte chunk", off, c.n)
	case n > c.n-off:
		return invalidArg(op, "%s of %d bytes at off %d overruns the %d-byte chunk", buf, n, off, c.n)
	}
	return nil
}

// Close gives the chunk back to its pool. It waits for copies in flight,
// and is idempotent and nil-safe: a second Close returns nil and frees
// nothing.
func (c *Chunk) Close() error {
	if c == nil {
		return nil
	}
	if c.pool == nil {
		return invalidArg("Chunk.Close", "a zero Chunk: only a Pool's Alloc makes one")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed && !c.closed {
		return invalidArg("Chunk.Close", "the chunk belongs to a mem.Buffer: close that Buffer (it refuses while a collective request holds it)")
	}
	return c.closeLocked()
}

// Seal hands the chunk's release to one owner (mem.AllocFrom's Buffer): Close then
// refuses, and the returned func closes it. Otherwise anyone holding the Region
// could free memory that the owner lends to the NIC, and the pool would hand its
// bytes to the next Alloc while a peer still writes them.
func (c *Chunk) Seal() (close func() error) {
	if c == nil || c.pool == nil {
		return func() error { return nil }
	}
	c.mu.Lock()
	c.sealed = true
	c.mu.Unlock()
	return func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.closeLocked()
	}
}

func (c *Chunk) closeLocked() error {
	if c.closed {
		return nil
	}
	c.closed = true
	c.pool.release(c.off, c.reserved)
	return nil
}

// writeDM writes src at pool offset at. Chunks start on Align (≥ 4)
// boundaries and reserve whole multiples of Align, so every word patched
// here lies inside the writer's own chunk: no other chunk's bytes are
// read and rewritten.
func (p *Pool) writeDM(at int, src []byte) error {
	if head := at & 3; head != 0 {
		n := min(4-head, len(src))
		if err := p.patchWord(at-head, head, src[:n]); err != nil {
			return err
		}
		at, src = at+n, src[n:]
	}
	if body := len(src) &^ 3; body > 0 {
		if err := p.dm.CopyTo(at, src[:body]); err != nil {
			return err
		}
		at, src = at+body, src[body:]
	}
	if len(src) > 0 {
		return p.patchWord(at, 0, src)
	}
	return nil
}

// patchWord replaces the bytes of the word at pool offset word, starting
// at byte skip, with b.
// Patches are serialized per pool: two copies into disjoint bytes of one word,
// each reading the word and writing it back, would otherwise undo each other.
func (p *Pool) patchWord(word, skip int, b []byte) error {
	p.patchMu.Lock()
	defer p.patchMu.Unlock()
	var w [4]byte
	if err := p.dm.CopyFrom(w[:], word); err != nil {
		return err
	}
	copy(w[skip:], b)
	return p.dm.CopyTo(word, w[:])
}

// readDM reads len(dst) bytes at pool offset at. The word buffers are declared where
// a partial word is read, so that an aligned read (the common case: control slots)
// allocates nothing.
func (p *Pool) readDM(dst []byte, at int) error {
	if head := at & 3; head != 0 {
		var w [4]byte
		if err := p.dm.CopyFrom(w[:], at-head); err != nil {
			return err
		}
		n := copy(dst, w[head:])
		at, dst = at+n, dst[n:]
	}
	if body := len(dst) &^ 3; body > 0 {
		if err := p.dm.CopyFrom(dst[:body], at); err != nil {
			return err
		}
		at, dst = at+body, dst[body:]
	}
	if len(dst) > 0 {
		var w [4]byte
		if err := p.dm.CopyFrom(w[:], at); err != nil {
			return err
		}
		copy(dst, w[:])
	}
	return nil
}
