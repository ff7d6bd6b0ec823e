package tlmlx5

import (
	"fmt"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// DefaultDMCapacity is the device memory a context takes when driver.Config.DMCapacity
// is 0: a quarter of a typical mlx5 MEMIC window (and of soft0's), because every
// process (and every goroutine rank with its own context) on the host shares the
// device's, first come first served, and a context that takes it all leaves the
// others none.
const DefaultDMCapacity = 64 << 10

// openPool opens the context's one pool of device memory: the DM buffers of AllocDM
// and asym's DM scratch are chunks of it (never the receive buffers of control
// blocks, ctlblock.go), so that
// the pool's one MR (zero-based, in the context's PD) reaches every one of them and
// nothing is registered per buffer. Where the device has no device memory, or others
// hold all of it, the pool is registered host memory behind the same API (its Kind
// says which).
func openPool(dev *verbs.Context, pd *verbs.PD, capacity int) (*dm.Pool, string, error) {
	if capacity < 0 || capacity > dm.MaxCapacity {
		return nil, "", fmt.Errorf("tlmlx5: Config.DMCapacity %d is not from 0 to %d: %w", capacity, dm.MaxCapacity, driver.ErrInvalid)
	}
	if capacity == 0 {
		capacity = DefaultDMCapacity
	}
	p, err := dm.NewPool(dev, pd, dm.Config{Capacity: capacity, HostWhenFull: true, Access: receiveAccess})
	if err == nil {
		return p, "", nil
	}
	// Device memory is an optimisation: a device that has it but fails to give
	// or register it (an injected fault included) must not make the transport
	// unusable. The reach's notes say why.
	why := fmt.Sprintf("dm: the device's memory failed (%v): the pool is host memory", err)
	p, err = dm.NewPool(dev, pd, dm.Config{Capacity: capacity, HostOnly: true, Access: receiveAccess})
	if err != nil {
		return nil, "", fmt.Errorf("device-memory pool: %w", err)
	}
	return p, why, nil
}

// addPoolReach lists DM in the reach when the pool is device memory: DM buffers of
// this context's pool are then used in place (see dmChunk). The CPU reaches DM only
// through the pool's copies, so a reduction's destination in DM is staged. Where the
// CPU's reads of DM are uncached loads (uncached), a reduction's source in DM is
// taken in place and copied into host memory through the NIC at every post (the
// loopback, srcin.go), rather than read by asym's staging through those loads.
func addPoolReach(r *mem.Reach, p *dm.Pool, why string, uncached bool) {
	if why != "" {
		r.Notes = append(r.Notes, why)
	}
	if p.Kind() != dm.KindDM {
		r.Notes = append(r.Notes, "dm: this context has no device memory (the pool is host memory): DM buffers staged through host")
		return
	}
	r.NIC = append(r.NIC, mem.DM)
	r.Notes = append(r.Notes, fmt.Sprintf("dm: buffers of this context's %d-byte pool used in place through its MR (AllocDM)", p.Capacity()))
	if uncached {
		r.ReduceSrc = append(r.ReduceSrc, mem.DM)
		r.Notes = append(r.Notes, "dm: a reduction's source copied into host memory through the NIC at every post (the CPU reads this device's memory through uncached loads); its destination staged through host")
	} else {
		r.Notes = append(r.Notes, "dm: reductions staged through host (the CPU reaches DM only through the pool's copies)")
	}
}

// AllocDM allocates a DM buffer of size bytes from the context's pool
// (driver.DMAllocator). It fails with an error wrapping ErrNotSupported where the
// pool is not device memory, and with one wrapping dm.ErrExhausted where the pool has
// no room.
func (c *context) AllocDM(size int) (*mem.Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("tlmlx5: AllocDM: size must be > 0, got %d: %w", size, driver.ErrInvalid)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("tlmlx5: AllocDM: context closed: %w", driver.ErrClosed)
	}
	if c.pool.Kind() != dm.KindDM {
		return nil, fmt.Errorf("tlmlx5: AllocDM: %s gave this context no device memory: %w", c.dev.Name(), driver.ErrNotSupported)
	}
	b, err := mem.AllocFrom(mem.DM, c.pool, size)
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: AllocDM: %w (the pool holds DM buffers and DM staging scratch)", err)
	}
	return b, nil
}

// dmChunk is the chunk of this context's pool behind a DM buffer. A DM buffer of
// another context (another device, or another process's or rank's context on the
// same device) is refused: its MR lives in another PD, which this context's QPs
// cannot use, and ibv_reg_dm_mr(3) takes only device memory of the PD's own context.
func (c *context) dmChunk(name string, b *mem.Buffer) (*dm.Chunk, error) {
	if b == nil {
		return nil, fmt.Errorf("tlmlx5: %s is DM memory without its mem.Buffer (DM has no address): %w", name, driver.ErrInvalid)
	}
	ch, ok := b.Region().(*dm.Chunk)
	switch {
	case !ok && b.Region() == nil:
		return nil, fmt.Errorf("tlmlx5: %s: the DM buffer is closed: %w", name, driver.ErrInvalid)
	case !ok:
		return nil, fmt.Errorf("tlmlx5: %s: the DM buffer's region (%T) is not from a dm pool: %w", name, b.Region(), driver.ErrInvalid)
	case ch.Pool().PD() != c.pd:
		return nil, fmt.Errorf("tlmlx5: %s: the DM buffer comes from another context's pool, whose MR this context's queue pairs cannot use; allocate it with this team's Context.AllocDM: %w", name, driver.ErrInvalid)
	}
	return ch, nil
}
