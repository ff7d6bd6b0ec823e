package dm

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// MaxCapacity bounds Config.Capacity: far beyond any NIC's device memory (an
// mlx5 MEMIC window is 256 KiB), so that a wild value is refused rather than
// mapped as host memory where the device has none.
const MaxCapacity = 1 << 30

// Defaults of Config.
const (
	DefaultCapacity = 256 << 10
	DefaultAlign    = 64
	DefaultAccess   = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
)

// Kinds of memory behind a pool, as Kind reports them.
const (
	KindDM   = "dm"   // NIC device memory (ibv_alloc_dm)
	KindHost = "host" // mmap'd host memory, where the device has none (or, with HostWhenFull, none free)
)

// pageGranule is the step of the size descent: MEMIC is handed out in
// pages, so probing finer than that only costs calls.
const pageGranule = 4 << 10

// ErrExhausted is wrapped (together with unix.ENOMEM) by Alloc when no
// free block of the pool is large enough.
var ErrExhausted = errors.New("dm pool exhausted")

// Config describes a pool. The zero value asks for the defaults.
type Config struct {
	// Capacity is the most memory the pool takes, in bytes (default
	// DefaultCapacity). A device with less free memory gives less: the
	// pool takes the largest block it can get. It is rounded down to a
	// multiple of Align.
	Capacity int
	// Align is the alignment of every chunk's offset, and the granule of
	// chunk sizes: a power of two ≥ 4 (default DefaultAlign).
	Align int
	// Access is the access of the pool's MR (default DefaultAccess).
	Access verbs.Access
	// NoHostFallback makes NewPool fail with the device's ErrNotSupported
	// error, instead of using host memory, where the device has no DM.
	NoHostFallback bool
	// HostWhenFull makes NewPool use host memory also where the device has
	// device memory but not one free block of Align bytes (other contexts
	// or processes hold it all), instead of failing with ENOMEM. A
	// transport's per-context pool sets it: its users keep working with
	// host memory, and Kind says so.
	HostWhenFull bool
	// HostOnly makes the pool registered host memory without trying the
	// device's memory: for a caller whose first NewPool failed on the device
	// and that wants the same API over host memory anyway.
	HostOnly bool
}

// Pool carves aligned chunks out of one block of device memory (or host
// memory, where the device has none) registered as one MR. It is safe for
// concurrent use.
type Pool struct {
	kind     string
	align    int
	capacity int
	pd       *verbs.PD
	mr       *verbs.MR // fixed at NewPool; Close is idempotent, so it stays set

	dm   *verbs.DM // KindDM
	host []byte    // KindHost: the pool's bytes, aligned to align
	raw  []byte    // KindHost: the whole mapping, for munmap

	mu      sync.Mutex
	free    []span // sorted by offset, never adjacent (coalesced)
	used    int
	out     int // chunks not yet closed
	closed  bool
	closing bool // Close began (and failed at a step, or the pool would be closed)

	patchMu sync.Mutex // serializes partial-word writes (patchWord)
}

// span is a free range [off, off+n) of the pool.
type span struct{ off, n int }

var (
	_ mem.Allocator = (*Pool)(nil)
	_ mem.Region    = (*Chunk)(nil)
)

func invalidArg(op, format string, args ...any) error {
	return fmt.Errorf("dm: %s: %s: %w", op, fmt.Sprintf(format, args...), verbs.ErrInvalid)
}

// NewPool takes the largest block of device memory that ctx gives, up to
// cfg.Capacity, registers it in pd as one zero-based MR (ibv_alloc_dm(3),
// ibv_reg_dm_mr(3)), and returns a pool over it. Where the device has no
// device memory (AllocDM answers ErrNotSupported, as rxe does), the pool
// uses mmap'd host memory registered with ibv_reg_mr(3) instead, unless
// cfg.NoHostFallback is set. On any error nothing is left allocated.
func NewPool(ctx *verbs.Context, pd *verbs.PD, cfg Config) (*Pool, error) {
	const op = "NewPool"
	if ctx == nil {
		return nil, invalidArg(op, "ctx is nil")
	}
	if pd == nil {
		return nil, invalidArg(op, "pd is nil")
	}
	if pd.Context() != ctx {
		return nil, invalidArg(op, "pd belongs to context %s, not to ctx %s", pd.Context().Name(), ctx.Name())
	}
	if cfg.Capacity < 0 || cfg.Capacity > MaxCapacity {
		return nil, invalidArg(op, "Config.Capacity must be from 0 to %d, got %d", MaxCapacity, cfg.Capacity)
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.Align == 0 {
		cfg.Align = DefaultAlign
	}
	if cfg.Align < 4 || cfg.Align&(cfg.Align-1) != 0 {
		return nil, invalidArg(op, "Config.Align must be a power of two >= 4, got %d", cfg.Align)
	}
	if cfg.Access == 0 {
		cfg.Access = DefaultAccess
	}
	want := cfg.Capacity &^ (cfg.Align - 1)
	if want == 0 {
		return nil, invalidArg(op, "Config.Capacity %d is smaller than Config.Align %d", cfg.Capacity, cfg.Align)
	}
	// The device's limit saves probing sizes it can never give. It is a
	// hint only: a device that cannot be queried is probed from want. The
	// host memory that stands in for the device's is held to it too, so a
	// context that finds the device's memory taken gets no more than the
	// first one did.
	if attr, err := ctx.Query(); err == nil && attr.MaxDMSize > 0 && uint64(want) > attr.MaxDMSize {
		want = int(attr.MaxDMSize) &^ (cfg.Align - 1)
		if want == 0 {
			want = cfg.Align // fails below with the device's own answer
		}
	}

	p := &Pool{align: cfg.Align, pd: pd}
	if cfg.HostOnly {
		if err := p.initHost(want, cfg.Access); err != nil {
			return nil, fmt.Errorf("dm: %s: host memory: %w", op, err)
		}
		p.free = []span{{0, p.capacity}}
		return p, nil
	}
	d, err := largestDM(ctx, want, cfg.Align)
	switch {
	case err == nil:
		if err := p.initDM(d, cfg.Access); err != nil {
			return nil, fmt.Errorf("dm: %s: %w", op, err)
		}
	case (errors.Is(err, verbs.ErrNotSupported) || cfg.HostWhenFull && retrySmaller(err)) && !cfg.NoHostFallback:
		if err := p.initHost(want, cfg.Access); err != nil {
			return nil, fmt.Errorf("dm: %s: no device memory on %s, and the host fallback failed: %w", op, ctx.Name(), err)
		}
	default:
		return nil, fmt.Errorf("dm: %s: %w", op, err)
	}
	p.free = []span{{0, p.capacity}}
	return p, nil
}

// retrySmaller says whether an AllocDM failure means "not that much": the
// device is short of memory. An injected fault stands for a failing
// device, not for an answer about size, so it ends the descent.
func retrySmaller(err error) bool {
	return errors.Is(err, unix.ENOMEM) && !errors.Is(err, verbs.ErrInjected)
}

// largestDM allocates the largest block of at most want bytes that ctx
// gives, in multiples of the page (or of align when that is larger). It
// halves until a size fits, then bisects between the largest size that
// fit and the smallest that did not. The block that fits is held, and
// given back only to try a larger one (a device with one pool of memory
// cannot hold both), then taken again if the larger one fails.
func largestDM(ctx *verbs.Context, want, align int) (*verbs.DM, error) {
	d, err := ctx.AllocDM(want)
	if err == nil || !retrySmaller(err) {
		return d, err
	}
	gran := max(align, pageGranule)
	tooBig, firstErr := want, err
	fits := 0
	for s := (want / 2) &^ (gran - 1); s >= gran; s = (s / 2) &^ (gran - 1) {
		d, err = ctx.AllocDM(s)
		if err == nil {
			fits = s
			break
		}
		if !retrySmaller(err) {
			return nil, err
		}
		tooBig = s
	}
	if fits == 0 {
		return nil, fmt.Errorf("no block of %d bytes or more is free: %w", gran, firstErr)
	}
	for tooBig-fits > gran {
		mid := fits + max(gran, ((tooBig-fits)/2)&^(gran-1))
		if d.Close() != nil {
			// The block that fits stays held (a failed free leaves it allocated):
			// keep it rather than probe on, which would lose it.
			return d, nil
		}
		bigger, err := ctx.AllocDM(mid)
		if err == nil {
			d, fits = bigger, mid
			continue
		}
		if !retrySmaller(err) {
			return nil, err
		}
		tooBig = mid
		if d, err = ctx.AllocDM(fits); err != nil {
			return nil, fmt.Errorf("re-allocating the %d bytes given back while probing %d: %w", fits, mid, err)
		}
	}
	return d, nil
}

func (p *Pool) initDM(d *verbs.DM, access verbs.Access) error {
	mr, err := p.pd.RegDMMR(d, 0, d.Len(), access)
	if err != nil {
		return errors.Join(err, d.Close())
	}
	p.kind, p.dm, p.mr, p.capacity = KindDM, d, mr, d.Len()
	return nil
}

func (p *Pool) initHost(size int, access verbs.Access) error {
	raw, host, err := mapHost(size, p.align)
	if err != nil {
		return err
	}
	mr, err := p.pd.RegMRAddr(addrOf(host), size, access)
	if err != nil {
		return errors.Join(err, unmapHost(raw))
	}
	p.kind, p.raw, p.host, p.mr, p.capacity = KindHost, raw, host, mr, size
	return nil
}

// Kind says what memory is behind the pool: KindDM or KindHost.
func (p *Pool) Kind() string {
	if p == nil {
		return ""
	}
	return p.kind
}

// MR is the pool's one memory region. Every chunk is inside it; for a DM
// pool it is zero-based (MR().Addr() == 0). The pool owns it: callers use
// its keys and never Close it.
func (p *Pool) MR() *verbs.MR {
	if p == nil {
		return nil
	}
	return p.mr
}

// PD is the protection domain the pool's MR lives in: only QPs of that PD may use
// the pool's keys.
func (p *Pool) PD() *verbs.PD {
	if p == nil {
		return nil
	}
	return p.pd
}

// Capacity is the size of the pool's block in bytes: the most the device
// gave, up to Config.Capacity.
func (p *Pool) Capacity() int {
	if p == nil {
		return 0
	}
	return p.capacity
}

// Align is the alignment of chunk offsets and the granule of chunk sizes.
func (p *Pool) Align() int {
	if p == nil {
		return 0
	}
	return p.align
}

// Used is the number of bytes held by open chunks, each counted rounded
// up to Align.
func (p *Pool) Used() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used
}

// Alloc carves a chunk of size bytes; it makes *Pool a mem.Allocator, and
// the Region it returns is a *Chunk. See AllocChunk.
func (p *Pool) Alloc(size int) (mem.Region, error) {
	c, err := p.AllocChunk(size)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// AllocChunk carves a chunk of size bytes at an offset aligned to Align,
// first fit. When no free block is large enough the error wraps
// ErrExhausted and unix.ENOMEM.
func (p *Pool) AllocChunk(size int) (*Chunk, error) {
	const op = "Alloc"
	if p == nil {
		return nil, invalidArg(op, "nil Pool")
	}
	if size <= 0 {
		return nil, invalidArg(op, "size must be > 0, got %d", size)
	}
	if size > p.capacity {
		return nil, fmt.Errorf("dm: %s: size %d exceeds the pool's capacity %d: %w (%w)", op, size, p.capacity, ErrExhausted, unix.ENOMEM)
	}
	need := (size + p.align - 1) &^ (p.align - 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return nil, fmt.Errorf("dm: %s: pool is closed: %w", op, verbs.ErrClosed)
	case p.closing:
		return nil, fmt.Errorf("dm: %s: pool is closing (its Close failed at a step and waits to be retried): %w", op, verbs.ErrClosed)
	}
	for i, s := range p.free {
		if s.n < need {
			continue
		}
		if s.n == need {
			p.free = append(p.free[:i], p.free[i+1:]...)
		} else {
			p.free[i] = span{s.off + need, s.n - need}
		}
		p.used += need
		p.out++
		return &Chunk{pool: p, off: s.off, n: size, reserved: need}, nil
	}
	largest := 0
	for _, s := range p.free {
		largest = max(largest, s.n)
	}
	return nil, fmt.Errorf("dm: %s: no free block for %d bytes (%d of %d bytes free, largest block %d): %w (%w)",
		op, size, p.capacity-p.used, p.capacity, largest, ErrExhausted, unix.ENOMEM)
}

// release returns a chunk's range to the free list, merging it with its
// neighbours so that freed memory can be carved again in one piece.
func (p *Pool) release(off, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := sort.Search(len(p.free), func(i int) bool { return p.free[i].off > off })
	mergePrev := i > 0 && p.free[i-1].off+p.free[i-1].n == off
	mergeNext := i < len(p.free) && off+n == p.free[i].off
	switch {
	case mergePrev && mergeNext:
		p.free[i-1].n += n + p.free[i].n
		p.free = append(p.free[:i], p.free[i+1:]...)
	case mergePrev:
		p.free[i-1].n += n
	case mergeNext:
		p.free[i] = span{off, n + p.free[i].n}
	default:
		p.free = append(p.free, span{})
		copy(p.free[i+1:], p.free[i:])
		p.free[i] = span{off, n}
	}
	p.used -= n
	p.out--
}

// Close deregisters the pool's MR and then frees its memory, in that
// order because ibv_free_dm(3) refuses while a DM MR lives. It fails with
// an error wrapping verbs.ErrBusy while chunks are open, and leaves the
// pool open if a step fails, so that Close may be retried. It is
// idempotent and nil-safe.
func (p *Pool) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if p.out > 0 {
		return fmt.Errorf("dm: Pool.Close: %d chunk(s) of %d bytes still open: %w", p.out, p.used, verbs.ErrBusy)
	}
	// MR and DM Close are idempotent, so a retry after a failed step
	// repeats the steps that already succeeded harmlessly. From here on the pool
	// hands out nothing: once its MR is gone a chunk would have no keys, and a
	// pool whose Close failed is only waiting for the retry.
	p.closing = true
	if err := p.mr.Close(); err != nil {
		return fmt.Errorf("dm: Pool.Close: %w", err)
	}
	switch p.kind {
	case KindDM:
		if err := p.dm.Close(); err != nil {
			return fmt.Errorf("dm: Pool.Close: %w", err)
		}
	case KindHost:
		if err := unmapHost(p.raw); err != nil {
			return fmt.Errorf("dm: Pool.Close: %w", err)
		}
		p.raw, p.host = nil, nil
	}
	p.closed = true
	p.free = nil
	return nil
}
