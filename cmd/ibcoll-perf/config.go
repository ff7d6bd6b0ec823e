package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
	"github.com/ibcoll/ibcoll/verbs"
)

// parseAlgs reads --alg: one NAME for every collective of -c, or
// COLL=NAME,... for some of them. Names are checked against the TL's table
// here, so that a typo is a usage error rather than a failed collective
// half-way through a sweep; whether the algorithm fits the team size waits
// for checkRanks.
func parseAlgs(spec string, colls []coll.CollType) (map[coll.CollType]string, error) {
	algs := map[coll.CollType]string{}
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return algs, nil
	}
	if !strings.Contains(spec, "=") {
		if strings.Contains(spec, ",") {
			return nil, fmt.Errorf("%q: want one NAME for every collective, or COLL=NAME,COLL=NAME", spec)
		}
		for _, c := range colls {
			if err := knownAlg(c, spec); err != nil {
				return nil, fmt.Errorf("%w (use COLL=NAME to pick per collective)", err)
			}
			algs[c] = spec
		}
		return algs, nil
	}
	for _, item := range strings.Split(spec, ",") {
		cs, name, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want COLL=NAME", item)
		}
		c, err := coll.ParseCollType(strings.TrimSpace(cs))
		if err != nil {
			return nil, fmt.Errorf("%q: unknown collective %q (valid: %s)", item, cs, strings.Join(collNames(), ", "))
		}
		if _, dup := algs[c]; dup {
			return nil, fmt.Errorf("%v given twice", c)
		}
		if err := knownAlg(c, name); err != nil {
			return nil, err
		}
		algs[c] = name
	}
	return algs, nil
}

// knownAlg checks a name ("knomial:4" names knomial) against c's table.
func knownAlg(c coll.CollType, alg string) error {
	name, _, _ := strings.Cut(alg, ":")
	valid := tlmlx5.Algorithms(c)
	if !slices.Contains(valid, name) {
		return fmt.Errorf("%q is not an algorithm of %v (valid: %s)", alg, c, strings.Join(valid, ", "))
	}
	return nil
}

// algEnv is the variable coll.ConfigFromEnv reads c's algorithm from.
func algEnv(c coll.CollType) string { return coll.AlgEnvPrefix + strings.ToUpper(c.String()) }

// config is rank's coll.Config: the flags, completed from the environment
// ($IBCOLL_DEVICE, $IBCOLL_GID_INDEX, $IBCOLL_ALG_<COLL>). --device wins
// over $IBCOLL_DEVICE there; --alg wins over $IBCOLL_ALG_<COLL> because it
// goes into Args.Alg, which overrides Config.Algs.
func (o *options) config(rank int) (coll.Config, error) {
	// A run with --fault is a test of the failure paths: its report shows how the
	// failed collective ended on every rank, which only the all-or-nothing agreement
	// makes the same everywhere (without it, ranks whose part was done succeed and go
	// on to a next collective that the failed rank never joins, and fail at their
	// deadline).
	cfg, err := coll.ConfigFromEnv(coll.Config{Device: o.deviceOf(rank), Timeout: o.timeout, Faults: o.faults,
		DMCapacity: o.dmCapacity, SoftGPUDirect: o.softGPUDirect, AllOrNothing: o.allOrNothing || len(o.faults) > 0}, o.getenv)
	if err != nil {
		return cfg, &usageError{msg: "environment: " + err.Error(), env: true}
	}
	return cfg, nil
}

// allOrNothingFrom says what turns coll.Config.AllOrNothing on for this run:
// "--all-or-nothing", "--fault" or "$IBCOLL_ALL_OR_NOTHING"; "" where it is off.
// checkRanks has accepted the environment before anything reports.
func (o *options) allOrNothingFrom() string {
	switch {
	case o.allOrNothing:
		return "--all-or-nothing"
	case len(o.faults) > 0:
		return "--fault"
	}
	if cfg, err := o.config(0); err == nil && cfg.AllOrNothing {
		return "$IBCOLL_ALL_OR_NOTHING"
	}
	return ""
}

// checkEnvAlgs checks this process's environment: that ConfigFromEnv accepts it,
// that every $IBCOLL_ALG_ variable names a collective and an algorithm of it
// (parseAlgs did not see them), and that those this run uses fit the team size
// (rh needs a power of two). checkRanks checks --alg's against the size.
func (o *options) checkEnvAlgs(size int) error {
	cfg, err := o.config(0)
	if err != nil {
		return err
	}
	if o.environ != nil {
		if err := unknownAlgVars(o.environ()); err != nil {
			return err
		}
	}
	// Every context refuses an unknown name in the environment, for collectives
	// this run does not use too: say so here, naming the variable, not as a device
	// that failed to open.
	for _, c := range coll.CollTypes() {
		if a := cfg.Algs[c]; a != "" && o.algs[c] == "" {
			if err := knownAlg(c, a); err != nil {
				return badArg("$"+algEnv(c), "%v", err)
			}
		}
	}
	for _, c := range o.colls {
		alg, from := o.algOf(c, cfg)
		if alg == "" || from == "--alg" { // --alg's are checkRanks'
			continue
		}
		if err := tlmlx5.Fits(c, alg, size); err != nil {
			return badArg(from, "%v %s: %v", c, alg, err)
		}
	}
	return nil
}

// algOf is the algorithm picked for c, and what picked it: "--alg", the
// environment variable, or nobody ("", ""), when the TL chooses by size.
func (o *options) algOf(c coll.CollType, cfg coll.Config) (alg, from string) {
	if a := o.algs[c]; a != "" {
		return a, "--alg"
	}
	if a := cfg.Algs[c]; a != "" {
		return a, "$" + algEnv(c)
	}
	return "", ""
}

// algHelp lists every collective's algorithms, for -h.
func algHelp() string {
	var b strings.Builder
	for _, c := range coll.CollTypes() {
		fmt.Fprintf(&b, "  %-15s %s\n", c, strings.Join(tlmlx5.Algorithms(c), ", "))
	}
	return b.String()
}

// shareDM gives every rank that uses a device an equal share of its memory
// (coll.Config.DMCapacity). The contexts on a device share its memory, first
// come first served: without shares the first ranks to open would take it
// all, and the others' dm buffers would fail. perDevice is how many ranks of
// this node use each device; 0 (unknown) leaves the transport's default.
func (o *options) shareDM(maxDM uint64, perDevice int) {
	if maxDM == 0 || perDevice < 1 {
		return
	}
	o.dmCapacity = max(64, int(maxDM)/perDevice&^63)
}

// ranksPerDevice is the most ranks, of n of this node, that use one device of
// --device (taken in turn): a device named twice in the list serves the ranks of
// both entries (--device soft0,soft0 gave each rank half the memory it needed to
// share with three others).
func (o *options) ranksPerDevice(n int) int {
	entries := strings.Split(o.device, ",")
	per := map[string]int{}
	most := 0
	for r := range n {
		d := strings.TrimSpace(entries[r%len(entries)])
		per[d]++
		most = max(most, per[d])
	}
	return most
}

// usesDM reports whether some rank's buffers are device memory.
func (o *options) usesDM() bool {
	if o.mem.src == mem.DM || o.mem.dst == mem.DM {
		return true
	}
	for _, m := range o.rankMem {
		if m.src == mem.DM || m.dst == mem.DM {
			return true
		}
	}
	return false
}

// usesGPU reports whether some rank uses CUDA or managed memory.
func (o *options) usesGPU() bool {
	gpu := func(t mem.Type) bool { return t == mem.CUDA || t == mem.CUDAManaged }
	if gpu(o.mem.src) || gpu(o.mem.dst) {
		return true
	}
	for _, m := range o.rankMem {
		if gpu(m.src) || gpu(m.dst) {
			return true
		}
	}
	return false
}

// checkDevice refuses, before anything is opened, a device that rank names
// (--device, or $IBCOLL_DEVICE) and this host does not have, and, under a launcher,
// a device that only reaches ranks of its own process (soft0, which is also what a
// host without an RDMA NIC places). An empty name is otherwise the placement's to
// choose. The refusal counts as the environment's: a device may be missing on one
// node of a launch only.
// checkCUDA refuses a rank whose buffers are CUDA memory where no CUDA driver
// answers: the run would otherwise start and fail its first allocation as a failed
// collective (exit 3), naming neither the flag nor the host.
func (o *options) checkCUDA(rank int) error {
	m := o.memOf(rank)
	isCUDA := func(t mem.Type) bool { return t == mem.CUDA || t == mem.CUDAManaged }
	if !isCUDA(m.src) && !isCUDA(m.dst) || mem.CUDAAvailable() {
		return nil
	}
	flag := "-m"
	if _, ok := o.rankMem[rank]; ok {
		flag = "--rank-mem"
	}
	return &usageError{msg: fmt.Sprintf("%s: rank %d's buffers are %v,%v memory, but no CUDA driver answers on this host (libcuda and a GPU are needed)",
		flag, rank, m.src, m.dst), env: true}
}

func (o *options) checkDevice(rank int) error {
	cfg, err := o.config(rank)
	if err != nil {
		return err
	}
	name, from := cfg.Device, "--device"
	if o.deviceOf(rank) == "" {
		from = "$" + coll.DeviceEnv
	}
	if name == "" {
		if !o.launched {
			return nil
		}
		name, from = coll.PlacedDevice(cfg), "device"
		if name == "" { // the transport's default: the first active real device, else soft0
			name, _, _ = deviceName("")
		}
	}
	devs, err := verbs.Devices()
	if err != nil {
		return nil // opening it says what is wrong
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		if d.Name != name {
			names[i] = d.Name
			continue
		}
		if o.launched && d.Provider == "soft" && !softUnderLauncher {
			return &usageError{msg: fmt.Sprintf("%s: %s reaches only the ranks of its own process, and under a launcher each process is one rank: give each an RDMA device, or run the ranks in one process with -np", from, name), env: true}
		}
		return nil
	}
	return &usageError{msg: fmt.Sprintf("%s: no device %q on this host (it has %s)", from, name, strings.Join(names, ", ")), env: true}
}

// unknownAlgVars refuses an $IBCOLL_ALG_ variable that names no collective
// (IBCOLL_ALG_REDUCESCATTER for IBCOLL_ALG_REDUCE_SCATTER): ConfigFromEnv reads
// only the names it knows, so a misspelt one was ignored without a word.
func unknownAlgVars(environ []string) error {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, coll.AlgEnvPrefix) {
			continue
		}
		known := false
		for _, c := range coll.CollTypes() {
			known = known || name == algEnv(c)
		}
		if !known {
			var valid []string
			for _, c := range coll.CollTypes() {
				valid = append(valid, algEnv(c))
			}
			return badArg("$"+name, "names no collective (valid: %s)", strings.Join(valid, ", "))
		}
	}
	return nil
}

// softUnderLauncher lets launched ranks use soft0: only tests set it, whose
// launched ranks are goroutines of one process, as soft0's ranks must be.
var softUnderLauncher bool
