package tlmlx5

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// Least privilege: a buffer the collective only reads (a source) is registered
// for local access alone, so no peer can write it; a buffer that receives
// (a destination, transport scratch) takes remote writes; no algorithm reads a
// peer's memory, so nothing is registered for remote read or atomics. A source is
// still registered with local write: the kernel then pins its pages writable,
// which breaks copy-on-write and replaces the shared zero page at registration.
// A read-only pin (before the kernel's reliable read-only long-term pins, about
// 5.19) could keep a page that was never written, and a write after Init (a
// persistent request's source filled for its first post) went to a new page that
// the NIC never read: it sent the old bytes. Memory the process cannot write falls
// back to a read-only registration (readOnlyAccess).
const (
	readAccess     = verbs.AccessLocalWrite
	readOnlyAccess = verbs.Access(0)
	receiveAccess  = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	// scratchAccess: the transport's own scratch receives, and this rank reads what
	// landed (folds it, forwards it), so it carries verbs.HintOwnerReads.
	scratchAccess = receiveAccess | verbs.HintOwnerReads
)

// regCache keeps memory registrations so that a buffer used by collective after
// collective is registered once. Entries are keyed by what identifies the memory and
// reference-counted; an entry nobody uses is kept (up to maxIdleRegs, least recently
// used dropped first) only when reuse is safe:
//   - Go slices: the MR pins them, so their address cannot be reused while cached;
//   - mem.Buffers: a freed Buffer reports address 0, so a stale entry is found and
//     dropped, and a new Buffer is a new key;
//   - raw addresses are deregistered as soon as unused: memory can be unmapped and
//     mapped again at the same address, and the NIC would still see the old pages.
//
// Scratch buffers registered for staging are deregistered when released (after the
// kept tasks that hold them), since coll frees them right after. Used under the team
// lock.
type regCache struct {
	pd      *verbs.PD
	entries map[regKey]*regEntry
	idle    []*regEntry // least recently used first
}

type regKey struct {
	addr   uintptr
	n      int
	buf    *mem.Buffer
	access verbs.Access // the same memory as source and as destination is two MRs
}

type regEntry struct {
	key     regKey
	mr      *verbs.MR
	refs    int
	keep    bool // may stay registered while unused
	scratch bool
}

func newRegCache(pd *verbs.PD) *regCache {
	return &regCache{pd: pd, entries: map[regKey]*regEntry{}}
}

// acquire registers (or finds) the memory with access: a slice, a mem.Buffer
// (whole), or a raw host address range.
func (c *regCache) acquire(slice []byte, buf *mem.Buffer, addr uintptr, n int, access verbs.Access, fault func() error) (*regEntry, error) {
	var k regKey
	switch {
	case slice != nil:
		k = regKey{addr: uintptr(unsafe.Pointer(unsafe.SliceData(slice))), n: len(slice), access: access}
	case buf != nil:
		if buf.Addr() == 0 {
			return nil, fmt.Errorf("tlmlx5: register: buffer is closed: %w", mem.ErrInvalid)
		}
		k = regKey{buf: buf, n: buf.Len(), access: access}
	default:
		k = regKey{addr: addr, n: n, access: access}
	}
	c.sweep()
	e := c.entries[k]
	if e == nil && access == readAccess {
		// Memory registered to receive serves for reading too (asym's scratch,
		// registered before its role is known).
		wk := k
		wk.access = receiveAccess
		e = c.entries[wk]
	}
	if e != nil {
		if e.refs == 0 {
			c.unidle(e)
		}
		e.refs++
		return e, nil
	}
	if fault != nil {
		if err := fault(); err != nil {
			return nil, fmt.Errorf("tlmlx5: register %d bytes: %w", k.n, err)
		}
	}
	var (
		mr  *verbs.MR
		err error
	)
	reg := func(access verbs.Access) (*verbs.MR, error) {
		switch {
		case slice != nil:
			return c.pd.RegMR(slice, access)
		case buf != nil:
			return c.pd.RegMRAddr(buf.Addr(), buf.Len(), access)
		}
		return c.pd.RegMRAddr(addr, n, access)
	}
	mr, err = reg(access)
	if err != nil && access == readAccess && (errors.Is(err, unix.EFAULT) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) {
		// A read-only mapping refuses a writable pin (EFAULT); any other failure
		// (memory, an injected fault) stands, or the stale-page risk would come back.
		if ro, roErr := reg(readOnlyAccess); roErr == nil {
			mr, err = ro, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: register %d bytes: %w", k.n, err)
	}
	e = &regEntry{key: k, mr: mr, refs: 1, keep: slice != nil || buf != nil}
	c.entries[k] = e
	return e, nil
}

// release drops a reference; an unused entry is kept or deregistered.
func (c *regCache) release(e *regEntry) error {
	if e == nil || e.refs == 0 {
		return nil
	}
	if e.refs > 1 {
		e.refs--
		return nil
	}
	if !e.keep || e.scratch {
		// The last reference goes only once the MR is gone: a failed
		// deregistration keeps the entry, so a retry deregisters again
		// instead of letting the memory be freed under a live MR.
		if err := c.drop(e); err != nil {
			return err
		}
		e.refs = 0
		return nil
	}
	e.refs = 0
	c.idle = append(c.idle, e)
	if len(c.idle) > maxIdleRegs {
		// The oldest idle entry goes. Its failure is not e's, whose reference is
		// dropped: it stays in entries, unreferenced, for close to deregister.
		old := c.idle[0]
		c.idle = c.idle[1:]
		_ = c.drop(old)
	}
	return nil
}

func (c *regCache) unidle(e *regEntry) {
	for i, x := range c.idle {
		if x == e {
			c.idle = append(c.idle[:i], c.idle[i+1:]...)
			return
		}
	}
}

func (c *regCache) drop(e *regEntry) error {
	if err := e.mr.Close(); err != nil {
		return err
	}
	delete(c.entries, e.key)
	return nil
}

// sweep drops idle entries of freed Buffers.
func (c *regCache) sweep() {
	for i := 0; i < len(c.idle); {
		e := c.idle[i]
		if e.key.buf != nil && e.key.buf.Addr() == 0 {
			if c.drop(e) == nil {
				c.idle = append(c.idle[:i], c.idle[i+1:]...)
				continue
			}
		}
		i++
	}
}

// close deregisters everything; entries still referenced are an error.
func (c *regCache) close() error {
	var errs []error
	for _, e := range c.entries {
		if e.refs > 0 {
			errs = append(errs, fmt.Errorf("tlmlx5: registration of %d bytes still in use", e.key.n))
			continue
		}
		if err := c.drop(e); err != nil {
			errs = append(errs, err)
		}
	}
	c.idle = c.idle[:0]
	return errors.Join(errs...)
}

// scratchReg is a staging scratch's registration (asym.Registration).
type scratchReg struct {
	t *team
	e *regEntry
}

func (r *scratchReg) Close() error {
	if r.e == nil {
		return nil
	}
	// Kept tasks hold the scratch too (taskcache.go): they go first, so that this
	// release is the last reference and deregisters before the caller frees.
	if err := r.t.dropCachedOn(r.e); err != nil {
		return err
	}
	if err := r.t.cache.release(r.e); err != nil {
		return err
	}
	r.e = nil
	return nil
}
