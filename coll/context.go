package coll

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ibcoll/ibcoll/bootstrap"
	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
)

var errCanceled = context.Canceled

// maxGIDIndex is the largest GID index: an address handle keeps it in eight bits
// (verbs refuses more, naming its own option).
const maxGIDIndex = 255

// The environment variables that ConfigFromEnv reads.
const (
	// DeviceEnv names the device when Config.Device is empty.
	DeviceEnv = "IBCOLL_DEVICE"
	// GIDIndexEnv picks the GID index of a RoCE port.
	GIDIndexEnv = "IBCOLL_GID_INDEX"
	// TrafficClassEnv, ServiceLevelEnv and PKeyIndexEnv set Config.TrafficClass,
	// ServiceLevel and PKeyIndex.
	TrafficClassEnv = "IBCOLL_TRAFFIC_CLASS"
	ServiceLevelEnv = "IBCOLL_SERVICE_LEVEL"
	PKeyIndexEnv    = "IBCOLL_PKEY_INDEX"
	// CUDADeviceEnv picks the CUDA device of CUDA memory.
	CUDADeviceEnv = mem.CUDADeviceEnv
	// SoftGPUDirectEnv turns on soft0's GPUDirect stand-in when it is "1" or "true".
	SoftGPUDirectEnv = "IBCOLL_SOFT_GPUDIRECT"
	// SoftDMUncachedEnv makes soft0 report uncached reads of its device memory when it
	// is "1" or "true" (Config.SoftDMUncached).
	SoftDMUncachedEnv = "IBCOLL_SOFT_DM_UNCACHED"
	// CUDAVisibleDevicesEnv is CUDA's own: the GPUs a local rank chooses from.
	CUDAVisibleDevicesEnv = "CUDA_VISIBLE_DEVICES"
	// AlgEnvPrefix prefixes the variables that pick algorithms:
	// IBCOLL_ALG_GATHER=knomial:4 and so on.
	AlgEnvPrefix = "IBCOLL_ALG_"
	// AllOrNothingEnv sets Config.AllOrNothing when it is "1" or "true".
	AllOrNothingEnv = "IBCOLL_ALL_OR_NOTHING"
)

// Config configures a Context.
type Config struct {
	// Device names the RDMA device ("mlx5_0", "rxe0", "soft0"); empty picks the
	// HCA nearest to the local rank's GPU where the node has GPUs (see LocalRank),
	// else the first active real device, else soft0. A name given here wins.
	Device string
	// GIDIndex picks the GID of a RoCE port; 0 lets the transport choose (RoCE v2
	// with an IPv4-mapped address first), so index 0 itself cannot be forced where a
	// RoCE v2 GID exists ($IBCOLL_GID_INDEX=0 is the same automatic choice).
	GIDIndex int
	// TrafficClass is the RoCE traffic class of the context's QPs (0 to 255; 0 the
	// default): a lossless RoCE fabric maps its DSCP to the priority with PFC and ECN
	// (NVIDIA's reference: 106, DSCP 26 with ECN, or 104), and traffic left at 0
	// usually lands on a lossy one, where a collective's incast drops packets.
	// ServiceLevel is the InfiniBand service level (0 to 15; on RoCE the VLAN
	// priority), PKeyIndex the partition key index (an SR-IOV function's key may
	// not be at 0). Every rank of a team should use the same; see verbs.Options.
	TrafficClass int
	ServiceLevel int
	PKeyIndex    int
	// CUDADevice is the ordinal of the CUDA device that CUDA memory of this process
	// uses (see mem.UseCUDADevice: the first choice holds for the process); NewContext
	// selects it. 0 means unset: the local rank's GPU where placement finds one (see
	// LocalRank), else the process's choice (device 0 unless one was made). Device 0
	// itself is fixed by $IBCOLL_CUDA_DEVICE=0 through ConfigFromEnv (failing, as any
	// other ordinal does, where the process already uses another device); NoPlacement
	// keeps the process's choice.
	CUDADevice int
	// LocalRank is this process's rank among the processes of its node
	// (ConfigFromEnv reads it from the launcher, see bootstrap.LocalRank). With
	// Device empty and a GPU on the node, NewContext opens the HCA nearest to the
	// local rank's GPU, and makes that GPU the process's CUDA device unless
	// CUDADevice (or $IBCOLL_CUDA_DEVICE) names one (package topology; ties
	// between equally near HCAs are spread over the GPUs that share them).
	// Goroutine ranks of one process share its local rank. A negative value is
	// an error.
	LocalRank int
	// LocalSize is how many processes of the job run on this node (ConfigFromEnv
	// reads it from the launcher, see bootstrap.LocalSize); 0 means unknown. Where
	// every process has a core of its own (LocalSize at most the node's CPUs), a
	// waiting rank that has a core polls for up to 5 ms before it sleeps, as MPI's
	// busy polling would the whole time; otherwise, or unknown, for 100 µs: a rank
	// that spins on a shared core takes it from the peer it waits for (see
	// "Progress" in docs/design.md). A negative value is an error.
	LocalSize int
	// CUDAVisibleDevices is $CUDA_VISIBLE_DEVICES (ConfigFromEnv reads it): the
	// GPUs the local rank chooses from ("" for all).
	CUDAVisibleDevices string
	// NoPlacement turns the topology's choice off: Device empty opens the first
	// active device, and CUDA device 0 stays the default.
	NoPlacement bool
	// cudaDeviceSet records that $IBCOLL_CUDA_DEVICE named the CUDA device, so
	// that a 0 there wins over the local rank's GPU too.
	cudaDeviceSet bool
	// algEnv names the variable each algorithm of Algs came from in ConfigFromEnv,
	// so that NewContext's refusal of a misspelt one names it.
	algEnv map[CollType][2]string // variable, value
	// SoftGPUDirect makes soft0 a stand-in for GPUDirect RDMA (verbs.Options.SoftGPUDirect):
	// it registers CUDA device memory and moves it with the CUDA copy engine, so that
	// the transport's direct CUDA path runs on a machine with a GPU and no RDMA NIC.
	// Real devices ignore it.
	SoftGPUDirect bool
	// SoftDMUncached makes soft0 report its device memory as a real device's, whose
	// bytes the CPU reads through uncached loads (verbs.Options.SoftDMUncached), so
	// that the transport copies out of it with the NIC, as it does on real hardware.
	// Real devices ignore it.
	SoftDMUncached bool
	// TLs names the transport layers to use, in order of preference; empty uses every
	// registered one. Today one TL runs a team: the first that opens.
	TLs []string
	// Timeout bounds every collective: a post that has not completed Timeout after it
	// was posted fails on this rank, which tells its peers, once a call of the
	// caller's (Wait, Test, another collective) polls the team. Wait's ctx deadline, when
	// it has one, replaces it for that Wait. 0 means DefaultTimeout; negative means no
	// bound other than Wait's ctx. NewTeam uses it too when its ctx has no deadline.
	Timeout time.Duration
	// AbortGrace bounds how long a failed collective waits for every peer to
	// acknowledge the abort (after which no peer can still write into this rank's
	// buffers). A peer that does not answer in time is cut off and the team breaks
	// (Request.Wait says what may take longer).
	// A rank answers even while its program makes no call: a team that no call polls
	// for AbortGrace/4 is polled every AbortGrace/4 by a goroutine of its own (it
	// answers within a quarter of the grace, within an eighth of it when its last call
	// was just before), so only a rank that reads nothing (a stopped or
	// hung process) is cut off.
	// 0 means DefaultAbortGrace; below MinAbortGrace is refused (see there).
	AbortGrace time.Duration
	// AllOrNothing makes every post end alike on every rank: a post succeeds only
	// once every rank finished it (a completion agreement over a k-nomial tree, 2
	// control hops per tree level after the data), so a failure anywhere, a late
	// copy-out included, fails it everywhere. Off (the default), a rank's post
	// succeeds as soon as its own part is done and its output is right; a failure
	// fails the post on every rank that had not finished its part when the news
	// reached it (see "Outcomes" in the package doc). Every rank must set the same.
	// One case stays unequal: when a team breaks (a queue-pair error, a peer cut off)
	// under a post that this rank had reported done to the agreement, and the decision
	// can no longer reach this rank, the post ends here with ErrTeamBroken (outcome
	// unknown) while other ranks may succeed.
	AllOrNothing bool
	// DMCapacity is the most NIC device memory (bytes) the context takes for its
	// pool: the DM buffers of AllocDM and DM staging scratch come from it (the
	// transport's receive buffers stay in host memory, see tlmlx5's ctlblock.go). Every context on a device shares the device's memory,
	// first come first served, so ranks that share a NIC should split it. 0 lets the
	// transport choose (tlmlx5: 64 KiB); a negative value is an error.
	DMCapacity int
	// ScratchCache bounds the bytes of staging buffers a team keeps between
	// requests for reuse (see "Asymmetric memory" in the package doc). 0
	// means DefaultScratchCache; a negative value keeps none.
	ScratchCache int
	// Algs picks algorithms per collective (overridden by Args.Alg). Every rank
	// must pick the same.
	Algs map[CollType]string
	// Faults injects failures, for tests and ibcoll-perf's --fault.
	Faults []Fault
}

// Context is one process's (or one goroutine rank's) handle on the library: the TLs
// opened on a device. It is safe for concurrent use.
type Context struct {
	cfg   Config
	place Placement
	tls   []driver.Context
	names []string

	mu     sync.Mutex
	teams  int
	closed bool
	made   bool // by NewContext: a zero Context has no TL to use
}

// ConfigFromEnv returns cfg completed from the environment through getenv (os.Getenv
// in a program): $IBCOLL_DEVICE names the device when cfg.Device is empty,
// $IBCOLL_GID_INDEX sets GIDIndex, $IBCOLL_TRAFFIC_CLASS TrafficClass,
// $IBCOLL_SERVICE_LEVEL ServiceLevel, $IBCOLL_PKEY_INDEX PKeyIndex and
// $IBCOLL_CUDA_DEVICE CUDADevice when they are 0, $IBCOLL_SOFT_GPUDIRECT=1 sets SoftGPUDirect,
// $IBCOLL_SOFT_DM_UNCACHED=1 sets SoftDMUncached, $IBCOLL_ALL_OR_NOTHING=1 sets
// AllOrNothing, the launcher's local rank (bootstrap.LocalRank: the variable of the
// launcher that bootstrap.Detect picks, else the first of $IBCOLL_LOCAL_RANK,
// $LOCAL_RANK, $OMPI_COMM_WORLD_LOCAL_RANK, $MPI_LOCALRANKID, $SLURM_LOCALID) sets
// LocalRank when it is 0, the launcher's local size (likewise: $IBCOLL_LOCAL_SIZE,
// $LOCAL_WORLD_SIZE, $OMPI_COMM_WORLD_LOCAL_SIZE, $MPI_LOCALNRANKS,
// the largest count of $SLURM_STEP_TASKS_PER_NODE) sets LocalSize when it is 0, $CUDA_VISIBLE_DEVICES sets
// CUDAVisibleDevices, and $IBCOLL_ALG_<COLL> (for example
// IBCOLL_ALG_GATHER=knomial:4) picks the algorithm of a collective over cfg.Algs. The
// library itself reads no environment: programs call this to honour those variables.
// Values are read without surrounding spaces, as bootstrap reads the launchers'.
// A malformed value is an error naming the variable; an algorithm's name is the
// transport's to judge, so NewContext refuses an unknown one, naming the variable.
func ConfigFromEnv(cfg Config, getenv func(string) string) (Config, error) {
	if getenv == nil {
		return cfg, invalid("ConfigFromEnv", "getenv is nil")
	}
	if cfg.Device == "" {
		cfg.Device = strings.TrimSpace(getenv(DeviceEnv))
	}
	if v := strings.TrimSpace(getenv(GIDIndexEnv)); v != "" && cfg.GIDIndex == 0 {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxGIDIndex {
			return cfg, invalid("ConfigFromEnv", "$%s is %q, want a GID index from 1 to %d (0: the automatic choice)", GIDIndexEnv, v, maxGIDIndex)
		}
		cfg.GIDIndex = n
	}
	for _, e := range []struct {
		name string
		max  int
		dst  *int
	}{{TrafficClassEnv, 255, &cfg.TrafficClass}, {ServiceLevelEnv, 15, &cfg.ServiceLevel}, {PKeyIndexEnv, 0xffff, &cfg.PKeyIndex}} {
		if v := strings.TrimSpace(getenv(e.name)); v != "" && *e.dst == 0 {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > e.max {
				return cfg, invalid("ConfigFromEnv", "$%s is %q, want 0 to %d", e.name, v, e.max)
			}
			*e.dst = n
		}
	}
	for _, e := range []struct {
		name string
		dst  *bool
	}{{SoftGPUDirectEnv, &cfg.SoftGPUDirect}, {SoftDMUncachedEnv, &cfg.SoftDMUncached}} {
		if v := strings.TrimSpace(getenv(e.name)); v != "" && !*e.dst {
			on, err := strconv.ParseBool(v)
			if err != nil {
				return cfg, invalid("ConfigFromEnv", "$%s is %q, want 1 or 0", e.name, v)
			}
			*e.dst = on
		}
	}
	if v := strings.TrimSpace(getenv(AllOrNothingEnv)); v != "" && !cfg.AllOrNothing {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, invalid("ConfigFromEnv", "$%s is %q, want 1 or 0", AllOrNothingEnv, v)
		}
		cfg.AllOrNothing = on
	}
	if v := strings.TrimSpace(getenv(CUDADeviceEnv)); v != "" && cfg.CUDADevice == 0 {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > math.MaxInt32 {
			return cfg, invalid("ConfigFromEnv", "$%s is %q, want a CUDA device ordinal from 0 to %d", CUDADeviceEnv, v, math.MaxInt32)
		}
		cfg.CUDADevice, cfg.cudaDeviceSet = n, true
	}
	if lr, _, ok, err := bootstrap.LocalRank(getenv); err != nil {
		return cfg, invalid("ConfigFromEnv", "local rank: %v", err)
	} else if ok && cfg.LocalRank == 0 {
		cfg.LocalRank = lr
	}
	if ls, _, ok, err := bootstrap.LocalSize(getenv); err != nil {
		return cfg, invalid("ConfigFromEnv", "local size: %v", err)
	} else if ok && cfg.LocalSize == 0 {
		cfg.LocalSize = ls
	}
	if cfg.CUDAVisibleDevices == "" {
		cfg.CUDAVisibleDevices = getenv(CUDAVisibleDevicesEnv)
	}
	algs := maps.Clone(cfg.Algs)
	for _, c := range CollTypes() {
		name := AlgEnvPrefix + strings.ToUpper(c.String())
		if v := strings.TrimSpace(getenv(name)); v != "" {
			if algs == nil {
				algs = map[CollType]string{}
			}
			algs[c] = v
			if cfg.algEnv == nil {
				cfg.algEnv = map[CollType][2]string{}
			}
			cfg.algEnv[c] = [2]string{name, v}
		}
	}
	cfg.Algs = algs
	return cfg, nil
}

// NewContext opens every TL that cfg names on cfg.Device.
func NewContext(cfg Config) (*Context, error) {
	for i, f := range cfg.Faults {
		if err := f.Validate(fmt.Sprintf("Config.Faults[%d]", i)); err != nil {
			return nil, &argError{"coll: NewContext: " + err.Error()}
		}
	}
	if cfg.GIDIndex < 0 || cfg.GIDIndex > maxGIDIndex {
		return nil, invalid("NewContext", "Config.GIDIndex %d is not from 0 to %d", cfg.GIDIndex, maxGIDIndex)
	}
	for _, f := range []struct {
		name     string
		val, max int
	}{{"TrafficClass", cfg.TrafficClass, 255}, {"ServiceLevel", cfg.ServiceLevel, 15}, {"PKeyIndex", cfg.PKeyIndex, 0xffff}} {
		if f.val < 0 || f.val > f.max {
			return nil, invalid("NewContext", "Config.%s %d is not from 0 to %d", f.name, f.val, f.max)
		}
	}
	if cfg.CUDADevice < 0 || cfg.CUDADevice > math.MaxInt32 {
		return nil, invalid("NewContext", "Config.CUDADevice %d is not from 0 to %d", cfg.CUDADevice, math.MaxInt32)
	}
	if cfg.LocalRank < 0 {
		return nil, invalid("NewContext", "Config.LocalRank is negative (%d)", cfg.LocalRank)
	}
	if cfg.LocalSize < 0 {
		return nil, invalid("NewContext", "Config.LocalSize is negative (%d)", cfg.LocalSize)
	}
	// $IBCOLL_CUDA_DEVICE=0 fixes device 0 as =1 fixes device 1; Config.CUDADevice 0
	// alone is unset (placement may choose).
	if cfg.CUDADevice > 0 || cfg.cudaDeviceSet {
		if err := useCUDADevice(cfg.CUDADevice); err != nil {
			return nil, fmt.Errorf("coll: NewContext: Config.CUDADevice: %w", err)
		}
	}
	if cfg.DMCapacity < 0 {
		return nil, invalid("NewContext", "Config.DMCapacity is negative (%d)", cfg.DMCapacity)
	}
	if cfg.AbortGrace < 0 {
		return nil, invalid("NewContext", "Config.AbortGrace is negative (%v)", cfg.AbortGrace)
	}
	if cfg.AbortGrace > 0 && cfg.AbortGrace < MinAbortGrace {
		return nil, invalid("NewContext", "Config.AbortGrace is %v, below MinAbortGrace (%v): a live peer that does not poll within the grace is cut off, which breaks the team and can leave a post that reported done without its decision while the others succeeded; use 0 (DefaultAbortGrace, %v) or at least %v",
			cfg.AbortGrace, MinAbortGrace, DefaultAbortGrace, MinAbortGrace)
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
	cfg.Algs = maps.Clone(cfg.Algs)
	cfg.TLs = slices.Clone(cfg.TLs)
	tls, err := driver.Lookup("Config.TLs", cfg.TLs)
	if err != nil {
		return nil, fmt.Errorf("coll: NewContext: %w", err)
	}
	pl := place(&cfg)
	c := &Context{cfg: cfg, place: pl, made: true}
	var errs []error
	for _, tl := range tls {
		tc, err := tl.Open(driver.Config{Device: cfg.Device, GIDIndex: cfg.GIDIndex, DMCapacity: cfg.DMCapacity,
			SoftGPUDirect: cfg.SoftGPUDirect, SoftDMUncached: cfg.SoftDMUncached, TrafficClass: cfg.TrafficClass, ServiceLevel: cfg.ServiceLevel, PKeyIndex: cfg.PKeyIndex})
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
	for _, tc := range c.tls {
		if d, ok := tc.(driver.DeviceNamer); ok {
			c.place.Opened = d.DeviceName() // set once, read without the lock
			break
		}
	}
	if err := c.checkAlgs(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// checkAlgs refuses an algorithm of Config.Algs that no TL knows by that name, naming
// the variable it came from: otherwise every Init of that collective would fail.
func (c *Context) checkAlgs() error {
	for _, ct := range CollTypes() {
		alg := c.cfg.Algs[ct]
		if alg == "" {
			continue
		}
		var errs []error
		for _, tc := range c.tls {
			if ch, ok := tc.(driver.AlgChecker); ok {
				err := ch.CheckAlg(ct, alg)
				if err == nil {
					errs = nil
					break
				}
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			from := fmt.Sprintf("Config.Algs[%v]", ct)
			if v := c.cfg.algEnv[ct]; v[1] == alg {
				from = "$" + v[0] + " (" + from + ")"
			}
			return &argError{fmt.Sprintf("coll: NewContext: %s is %q: %v", from, alg, errors.Join(errs...))}
		}
	}
	return nil
}

// AllocDM allocates size bytes of NIC device memory from the context's pool (see
// Config.DMCapacity). Teams of this context use such a buffer in place, through the
// pool's memory registration; a DM buffer of another context is refused by their
// collectives, since its registration belongs to that context. Reductions stage DM
// through host memory: the CPU cannot address it. The caller owns the buffer and
// closes it before the context. It fails with an error wrapping ErrNotSupported
// where the context's device gave it no device memory (rxe, or every block taken by
// other contexts).
func (c *Context) AllocDM(size int) (*mem.Buffer, error) {
	if c == nil {
		return nil, invalid("AllocDM", "nil Context")
	}
	if !c.made {
		return nil, invalid("AllocDM", "a zero Context: only NewContext makes a usable one")
	}
	if size <= 0 {
		return nil, invalid("AllocDM", "size must be > 0, got %d", size)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("coll: AllocDM: context: %w", ErrClosed)
	}
	tc := c.tls[0]
	c.mu.Unlock()
	a, ok := tc.(driver.DMAllocator)
	if !ok {
		return nil, fmt.Errorf("coll: AllocDM: TL %s has no device memory: %w", c.names[0], ErrNotSupported)
	}
	b, err := a.AllocDM(size)
	if err != nil {
		return nil, fmt.Errorf("coll: AllocDM: %w", err)
	}
	return b, nil
}

// Config returns the configuration in force (defaults filled in). Its TLs, Algs and
// Faults are copies: the context's teams read its own, so a caller that edits the
// result (to derive another context's Config) changes nothing in force.
func (c *Context) Config() Config {
	if c == nil {
		return Config{}
	}
	cfg := c.cfg
	cfg.TLs = slices.Clone(cfg.TLs)
	cfg.Algs = maps.Clone(cfg.Algs)
	cfg.Faults = slices.Clone(cfg.Faults)
	return cfg
}

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
	var failed []driver.Context
	var names []string
	for i := len(c.tls) - 1; i >= 0; i-- {
		if err := c.tls[i].Close(); err != nil {
			errs = append(errs, err)
			failed = append([]driver.Context{c.tls[i]}, failed...)
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

// TLs returns the names of the registered transports, sorted.
func TLs() []string { return driver.Names() }
