package coll

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

var errCanceled = context.Canceled

// DefaultTimeout is the collective timeout when Config.Timeout is 0.
const DefaultTimeout = 60 * time.Second

// DefaultAbortGrace is how long a failing collective waits for its peers to acknowledge
// the abort when Config.AbortGrace is 0.
const DefaultAbortGrace = time.Second

// DefaultScratchCache is Config.ScratchCache's default.
const DefaultScratchCache = 256 << 20

// AlgEnvPrefix prefixes the environment variables that pick algorithms:
// IBCOLL_ALG_GATHER=knomial:4 and so on.
const AlgEnvPrefix = "IBCOLL_ALG_"

// Config configures a Context.
type Config struct {
	// Device names the RDMA device ("mlx5_0", "rxe0", "soft0"); empty picks
	// $IBCOLL_DEVICE, else the first active real device, else soft0.
	Device string
	// TLs names the transport layers to use, in order of preference; empty uses every
	// registered one. Today one TL runs a team: the first that opens.
	TLs []string
	// Timeout bounds every collective: a post that has not completed Timeout after it
	// was posted fails on this rank, which tells its peers. Wait's ctx deadline, when
	// it has one, replaces it for that Wait. 0 means DefaultTimeout; negative means no
	// bound other than Wait's ctx. NewTeam uses it too when its ctx has no deadline.
	Timeout time.Duration
	// AbortGrace bounds how long a failed collective waits for every peer to
	// acknowledge the abort (after which no peer can still write into this rank's
	// buffers). A peer that does not answer in time is fenced off and the team breaks.
	// 0 means DefaultAbortGrace.
	AbortGrace time.Duration
	// ScratchCache bounds the bytes of staging buffers a team keeps between
	// requests for reuse (see "Asymmetric memory" in the package doc). 0
	// means DefaultScratchCache; a negative value keeps none.
	ScratchCache int
	// Algs picks algorithms per collective (overridden by Args.Alg and by
	// $IBCOLL_ALG_<COLL>). Every rank must pick the same.
	Algs map[CollType]string
	// Faults injects failures, for tests and ibcoll-perf's --fault.
	Faults []Fault
}

// Context is one process's (or one goroutine rank's) handle on the library: the TLs
// opened on a device. It is safe for concurrent use.
type Context struct {
	cfg   Config
	tls   []TLContext
	names []string

	mu     sync.Mutex
	teams  int
	closed bool
}

// NewContext opens every TL that cfg names on cfg.Device.
func NewContext(cfg Config) (*Context, error) {
	for i, f := range cfg.Faults {
		if err := f.validate(i); err != nil {
			return nil, err
		}
	}
	if cfg.AbortGrace < 0 {
		return nil, invalid("NewContext", "Config.AbortGrace is negative (%v)", cfg.AbortGrace)
	}
	for c := range cfg.Algs {
		if !c.Valid() {
			return nil, invalid("NewContext", "Config.Algs has an unknown collective (%d)", uint8(c))
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.AbortGrace == 0 {
		cfg.AbortGrace = DefaultAbortGrace
	}
	if cfg.ScratchCache == 0 {
		cfg.ScratchCache = DefaultScratchCache
	}
	cfg.Faults = append([]Fault(nil), cfg.Faults...)
	algs := map[CollType]string{}
	for c, a := range cfg.Algs {
		algs[c] = a
	}
	for _, c := range CollTypes() {
		if v := os.Getenv(AlgEnvPrefix + strings.ToUpper(c.String())); v != "" {
			algs[c] = v
		}
	}
	cfg.Algs = algs
	tls, err := lookupTLs(cfg.TLs)
	if err != nil {
		return nil, err
	}
	c := &Context{cfg: cfg}
	var errs []error
	for _, tl := range tls {
		tc, err := tl.NewContext(TLConfig{Device: cfg.Device})
		if err != nil {
			errs = append(errs, fmt.Errorf("TL %s: %w", tl.Name(), err))
			continue
		}
		c.tls = append(c.tls, tc)
		c.names = append(c.names, tl.Name())
	}
	if len(c.tls) == 0 {
		return nil, fmt.Errorf("coll: NewContext: no TL opened on device %q: %w", cfg.Device, errors.Join(errs...))
	}
	return c, nil
}

// Config returns the configuration in force (defaults filled in).
func (c *Context) Config() Config { return c.cfg }

// Close closes the TLs. It fails with ErrBusy while a team of the context is open. It
// is idempotent and nil-safe.
func (c *Context) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if c.teams > 0 {
		return fmt.Errorf("coll: Context.Close: %d team(s) still open: %w", c.teams, ErrBusy)
	}
	// Close in reverse order; keep the TLs that failed, so that a retry
	// closes exactly those.
	var errs []error
	var failed []TLContext
	var names []string
	for i := len(c.tls) - 1; i >= 0; i-- {
		if err := c.tls[i].Close(); err != nil {
			errs = append(errs, err)
			failed = append([]TLContext{c.tls[i]}, failed...)
			names = append([]string{c.names[i]}, names...)
		}
	}
	c.tls, c.names = failed, names
	if len(errs) > 0 {
		return fmt.Errorf("coll: Context.Close: %w", errors.Join(errs...))
	}
	c.closed = true
	return nil
}
