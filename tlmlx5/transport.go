package tlmlx5

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// Name is the name the transport registers under.
const Name = "mlx5"

func init() { driver.Register(transport{}) }

type transport struct{}

func (transport) Name() string { return Name }

func (transport) Open(cfg driver.Config) (driver.Context, error) {
	dev, err := verbs.OpenWith(cfg.Device, verbs.Options{GIDIndex: cfg.GIDIndex, SoftGPUDirect: cfg.SoftGPUDirect,
		SoftDMUncached: cfg.SoftDMUncached, TrafficClass: cfg.TrafficClass, ServiceLevel: cfg.ServiceLevel, PKeyIndex: cfg.PKeyIndex})
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: %w", err)
	}
	attr, err := dev.Query()
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: %w", closeJoin(err, dev))
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: %w", closeJoin(err, dev))
	}
	pool, poolNote, err := openPool(dev, pd, cfg.DMCapacity)
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: %w", closeJoin(err, pd, dev))
	}
	reach, probes, err := probeReach(pd)
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: %w", closeJoin(err, pool, pd, dev))
	}
	addPoolReach(&reach, pool, poolNote, attr.DMUncachedReads)
	return &context{dev: dev, pd: pd, attr: attr, reach: reach, pool: pool, probes: probes}, nil
}

// context is the transport opened on one device: the device, one protection domain
// and one pool of device memory (dmpool.go), which every team of the context shares.
type context struct {
	dev   *verbs.Context
	pd    *verbs.PD
	attr  verbs.DeviceAttr
	reach mem.Reach
	pool  *dm.Pool
	// probes: what the reach probe could not release (reach.go), released before the
	// PD.
	probes []*probeLeft

	mu     sync.Mutex
	teams  int
	closed bool
}

// Reach is what Open probed: see probeReach.
func (c *context) Reach() mem.Reach { return c.reach }

// DeviceName is the name of the device the context opened (driver.DeviceNamer).
func (c *context) DeviceName() string { return c.dev.Name() }

// handles reports whether buffers of type t are used as they are: the NIC registers
// them (DM: the pool's own memory, whose local copies go through the pool). A
// reduction needs the CPU to reach them too (handlesReduction).
func (c *context) handles(t mem.Type) bool { return c.reach.NICReaches(t) }

// handlesReduction: the transport reduces on the CPU.
func (c *context) handlesReduction(t mem.Type) bool {
	return c.reach.NICReaches(t) && c.reach.CPUReaches(t)
}

// copiesIn: a reduction takes a source of type t and copies it into host memory at
// every post (srcin.go).
func (c *context) copiesIn(t mem.Type) bool {
	return !c.reach.CPUReaches(t) && c.reach.ReducesFrom(t)
}

func (c *context) NewEndpoint(p driver.TeamParams) (driver.Endpoint, []byte, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("tlmlx5: context closed: %w", driver.ErrClosed)
	}
	c.teams++
	c.mu.Unlock()
	t, addr, err := newTeam(c, p)
	if err != nil {
		c.mu.Lock()
		c.teams--
		c.mu.Unlock()
		return nil, nil, err
	}
	return t, addr, nil
}

func (c *context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if c.teams > 0 {
		return fmt.Errorf("tlmlx5: %d team(s) open: %w", c.teams, driver.ErrBusy)
	}
	// The pool goes first (its MR lives in the PD); it refuses while DM buffers
	// from AllocDM are open, and the context then stays open for a retry.
	for len(c.probes) > 0 {
		if err := c.probes[0].Close(); err != nil {
			return fmt.Errorf("tlmlx5: %w", err)
		}
		c.probes = c.probes[1:]
	}
	if err := c.pool.Close(); err != nil {
		return fmt.Errorf("tlmlx5: close the device-memory pool (close the DM buffers allocated from this context first): %w", err)
	}
	if err := c.pd.Close(); err != nil {
		return fmt.Errorf("tlmlx5: %w", err)
	}
	if err := c.dev.Close(); err != nil {
		return fmt.Errorf("tlmlx5: %w", err)
	}
	c.closed = true
	return nil
}

func closeJoin(err error, cs ...interface{ Close() error }) error {
	for _, c := range cs {
		if e := c.Close(); e != nil {
			err = fmt.Errorf("%w (and closing: %v)", err, e)
		}
	}
	return err
}

// ptr turns an address of memory Go does not own (mmap, C) into a pointer, spelled so
// that vet does not flag it.
func ptr(a uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&a)) }

func hostBytes(a uintptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr(a)), n)
}
