package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
	"golang.org/x/sys/unix"
)

// maxTimeout bounds --timeout, far beyond any collective, so that the deadlines
// built from it (the store's, a minute more) cannot overflow.
const maxTimeout = 1000 * time.Hour

// usageError is a bad command line or environment: exit status 2, with a
// message that names the argument or variable. env marks one that came from this
// process's environment, which may differ between the ranks of a launch.
type usageError struct {
	msg string
	env bool
}

func (e *usageError) Error() string { return e.msg }

// badArg names the flag, or the environment variable ("$IBCOLL_..."), at fault.
func badArg(flagName, format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf("%s: %s", flagName, fmt.Sprintf(format, args...)), env: strings.HasPrefix(flagName, "$")}
}

// fromEnv says whether err is a refusal of this process's environment.
func fromEnv(err error) bool {
	var u *usageError
	return errors.As(err, &u) && u.env
}

// memPair is a rank's source and destination memory types.
type memPair struct{ src, dst mem.Type }

func (m memPair) String() string { return m.src.String() + "," + m.dst.String() }

type options struct {
	colls      []coll.CollType
	minSize    int64
	maxSize    int64
	factor     int64
	dtype      coll.DType
	op         coll.Op
	root       int
	iters      int
	warmup     int
	persistent bool
	inPlace    bool
	mem        memPair
	rankMem    map[int]memPair
	check      bool
	sync       bool
	device     string
	// localRank is the launcher's local rank of this process (-1 unknown); set
	// only under a launcher, where --device lists are taken by it.
	localRank     int
	launched      bool
	algs          map[coll.CollType]string // from --alg
	timeout       time.Duration
	json          bool
	plot          string
	faults        []coll.Fault
	np            int
	npSet         bool
	seed          uint64
	quiet         bool
	cpuProfile    string
	trace         string
	getenv        func(string) string // for coll.ConfigFromEnv
	environ       func() []string     // the whole environment, for names ConfigFromEnv does not know
	misplaced     error               // the launcher placed this process in the job but not on its node
	softGPUDirect bool
	allOrNothing  bool
	dmCapacity    int // coll.Config.DMCapacity: this rank's share of its device's memory
}

type faultList []coll.Fault

func (f *faultList) String() string { return fmt.Sprint(*f) }
func (f *faultList) Set(s string) error {
	v, err := coll.ParseFault(s)
	if err != nil {
		return err
	}
	*f = append(*f, v)
	return nil
}

// faultKinds lists the kinds --fault takes, as coll.ParseFault spells them.
func faultKinds() string {
	var names []string
	for _, k := range perfFaultKinds {
		names = append(names, k.String())
	}
	return strings.Join(names, ", ")
}

// perfFaultKinds are the fault kinds --fault takes: coll's others (deadline, team,
// connect) stand for failures that its own tests stage, not for a run of this tool.
var perfFaultKinds = []coll.FaultKind{coll.FaultAlloc, coll.FaultReg, coll.FaultInit, coll.FaultCopyIn,
	coll.FaultCopyOut, coll.FaultQPErr, coll.FaultStall}

// sizeHelp says what -b/-e mean per collective and how the bus bandwidth
// column is computed from them.
const sizeHelp = `
Sizes (-b, -e) are per block: what one rank contributes (gather, scatter,
allgather), sends to each peer (alltoall), receives (reduce_scatter), or
the whole vector (bcast, reduce, allreduce). The v-collectives vary it:
gatherv, scatterv and allgatherv give rank r block+(r%3)-1 elements;
alltoallv has rank i send rank j block+((2i+j)%3)-1 elements, in place
block+((i+j)%3)-1 (symmetric), never below 0 and all 0 in -b 0's row; their
layouts leave gaps, which --check
requires to stay untouched. Bus bandwidth is bytes/time × factor, as in
nccl-tests, with n ranks: n blocks × (n-1)/n for gather(v), scatter(v),
allgather(v), reduce_scatter and alltoall(v) (the n blocks each rank sends);
the vector × 2(n-1)/n for allreduce; the vector for bcast and reduce.
The v-collectives are charged their nominal block.
`

// parseOptions reads the command line. Its flags follow ucc_perftest where
// that tool has them.
func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("ibcoll-perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o                               options
		collList, minS, maxS, dtype, op string
		algSpec                         string
		memSpec, rankMem                string
		faults                          faultList
	)
	fs.StringVar(&collList, "c", "gather", "collective(s), comma separated: "+strings.Join(collNames(), ", "))
	fs.StringVar(&minS, "b", "8", "minimum message size in bytes (K, M, G suffixes; at least one element of -d; 0: a row of empty collectives, then the sweep from one element; each size is rounded down to whole elements)")
	fs.StringVar(&maxS, "e", "1M", "maximum message size in bytes (K, M, G suffixes)")
	fs.Int64Var(&o.factor, "f", 2, "size multiplication factor between steps")
	fs.StringVar(&dtype, "d", "int8", "datatype")
	fs.StringVar(&op, "o", "sum", "reduction operator")
	fs.IntVar(&o.root, "r", 0, "root rank of rooted collectives")
	fs.IntVar(&o.iters, "n", 20, "timed iterations per size")
	fs.IntVar(&o.warmup, "w", 2, "warm-up iterations per size")
	fs.BoolVar(&o.persistent, "p", false, "persistent collectives: initialized once per size, re-posted every iteration")
	fs.BoolVar(&o.inPlace, "i", false, "in-place collectives")
	fs.StringVar(&memSpec, "m", "host", "memory types SRC[,DST] for all ranks: host, cuda, cuda-managed, dm (NIC device memory, from each rank's context), sim")
	fs.StringVar(&rankMem, "rank-mem", "", "per-rank memory types 'R:SRC,DST;R:SRC,DST' (strong asymmetry)")
	fs.BoolVar(&o.check, "check", false, "validate every iteration against a reference, with fresh random data")
	fs.BoolVar(&o.sync, "sync", false, "line the ranks up with an untimed barrier before every iteration, as ucc_perftest does (--check always does); without it a rank that is done posts its next iteration at once, and its time includes waiting for slower peers")
	fs.StringVar(&o.device, "device", "", "RDMA device, or a comma list that ranks take in turn (local rank r, or rank r without a launcher's local rank, uses entry r mod len) (default: $IBCOLL_DEVICE, else the HCA nearest to the local rank's GPU, else the first active real device, else soft0)")
	fs.StringVar(&algSpec, "alg", "", "algorithm: NAME for every collective of -c, or COLL=NAME,COLL=NAME (names below; default: $IBCOLL_ALG_<COLL>, else chosen by size and team size)")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "per-collective deadline (at most 1000h); a rank that misses it aborts the collective on every rank")
	fs.BoolVar(&o.json, "json", false, "print results as JSON instead of tables")
	fs.StringVar(&o.plot, "plot", "", "write a bandwidth-against-size chart to this .svg or .png file")
	fs.Var(&faults, "fault", "inject a failure: KIND@RANK[:N], repeatable (kinds: "+faultKinds()+"); one that never fires is reported, with why, and the run exits 2. N counts the rank's steps of that kind in every collective of its team, this tool's untimed line-up barriers included (one before each size, one before every iteration with --sync or --check and one after with --check): a failure in one of those is named as such")
	fs.BoolVar(&o.allOrNothing, "all-or-nothing", false, "every post ends alike on every rank (coll.Config.AllOrNothing: a completion agreement after the data; default: $IBCOLL_ALL_OR_NOTHING; always on with --fault)")
	fs.BoolVar(&o.softGPUDirect, "soft-gpudirect", false, "soft0 as a GPUDirect stand-in: it registers CUDA device memory and moves it with the copy engine (default: $IBCOLL_SOFT_GPUDIRECT)")
	fs.IntVar(&o.np, "np", 0, "run this many ranks in one process on the default device (soft0 where there is no RDMA NIC; --device soft0 forces it) (default without a launcher: 2); refused when their teams (about 0.6 MiB per rank, 48 KiB per queue pair and 1.5 KiB per operation of a collective's graph, by its algorithm; queue pairs are made on first use) and the largest row's data buffers would exceed 3/4 of MemAvailable")
	fs.Uint64Var(&o.seed, "seed", 0, "seed for --check data (default: from the clock, below 2^53 so that --json readers that use doubles keep it; printed)")
	fs.BoolVar(&o.quiet, "q", false, "no progress line")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) of the whole run to this file; under a launcher each process writes FILE.rankR")
	fs.StringVar(&o.trace, "trace", "", "write a Go execution trace (go tool trace) of the whole run to this file, each timed iteration a region named iteration; under a launcher each process writes FILE.rankR")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of ibcoll-perf:\n")
		fs.PrintDefaults()
		fmt.Fprint(stderr, sizeHelp, "\nAlgorithms (--alg, $IBCOLL_ALG_<COLL>):\n", algHelp())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &usageError{msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, badArg("arguments", "unexpected %q (all options are flags)", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "np" {
			o.npSet = true
		}
	})
	var err error
	for _, name := range strings.Split(collList, ",") {
		c, perr := coll.ParseCollType(strings.TrimSpace(name))
		if perr != nil {
			return nil, badArg("-c", "unknown collective %q (valid: %s)", name, strings.Join(collNames(), ", "))
		}
		if slices.Contains(o.colls, c) {
			// Its rows would come twice, and --plot would draw the two sweeps as one line.
			return nil, badArg("-c", "%v is listed twice (-c %s)", c, collList)
		}
		o.colls = append(o.colls, c)
	}
	if o.algs, err = parseAlgs(algSpec, o.colls); err != nil {
		return nil, badArg("--alg", "%v", err)
	}
	for c := range o.algs {
		if !slices.Contains(o.colls, c) {
			return nil, badArg("--alg", "%v=%s names a collective that -c does not run (-c %s)", c, o.algs[c], collList)
		}
	}
	if o.minSize, err = parseSize(minS); err != nil {
		return nil, badArg("-b", "%v", err)
	}
	if o.maxSize, err = parseSize(maxS); err != nil {
		return nil, badArg("-e", "%v", err)
	}
	if o.maxSize < o.minSize {
		return nil, badArg("-e", "maximum size %d is below the minimum -b %d", o.maxSize, o.minSize)
	}
	if o.factor < 2 {
		return nil, badArg("-f", "factor must be >= 2, got %d", o.factor)
	}
	if o.dtype, err = coll.ParseDType(dtype); err != nil {
		return nil, badArg("-d", "unknown datatype %q (valid: %s)", dtype, strings.Join(dtypeNames(), ", "))
	}
	if elem := int64(o.dtype.Size()); o.maxSize > 0 && o.maxSize < elem {
		// The sweep starts at one element: no row would run, and a run that
		// measures nothing must not look like one that did.
		return nil, badArg("-e", "maximum size %d is below one %v element (%d bytes)", o.maxSize, o.dtype, elem)
	}
	if o.op, err = coll.ParseOp(op); err != nil {
		return nil, badArg("-o", "unknown operator %q (valid: %s)", op, strings.Join(opNames(), ", "))
	}
	if err := coll.CheckOp(o.op, o.dtype); err != nil {
		for _, c := range o.colls {
			if c.IsReduction() {
				return nil, badArg("-o", "%v cannot reduce %v", o.op, o.dtype)
			}
		}
	}
	if o.iters < 1 {
		return nil, badArg("-n", "iterations must be >= 1, got %d", o.iters)
	}
	if o.warmup < 0 {
		return nil, badArg("-w", "warm-up iterations must be >= 0, got %d", o.warmup)
	}
	if o.timeout <= 0 || o.timeout > maxTimeout {
		return nil, badArg("--timeout", "must be > 0 and at most %v, got %v", maxTimeout, o.timeout)
	}
	if o.np < 0 || o.np > maxNP || (o.npSet && o.np == 0) {
		return nil, badArg("-np", "must be between 1 and %d, got %d", maxNP, o.np)
	}
	if o.device != "" {
		for _, d := range strings.Split(o.device, ",") {
			if strings.TrimSpace(d) == "" {
				return nil, badArg("--device", "%q has an empty entry", o.device)
			}
		}
	}
	if o.mem, err = parseMemPair(memSpec); err != nil {
		return nil, badArg("-m", "%v", err)
	}
	if o.rankMem, err = parseRankMem(rankMem); err != nil {
		return nil, badArg("--rank-mem", "%v", err)
	}
	if err := distinctOutputs(map[string]string{"--plot": o.plot, "--cpuprofile": o.cpuProfile, "--trace": o.trace}); err != nil {
		return nil, err
	}
	if o.plot != "" && !strings.HasSuffix(strings.ToLower(o.plot), ".svg") && !strings.HasSuffix(strings.ToLower(o.plot), ".png") {
		return nil, badArg("--plot", "%q must end in .svg or .png", o.plot)
	}
	if o.plot != "" && (o.maxSize == 0 || !slices.ContainsFunc(o.colls, func(c coll.CollType) bool { return c != coll.Barrier })) {
		return nil, badArg("--plot", "nothing to plot: a barrier, and -b 0's row, move no bytes")
	}
	for _, f := range faults {
		if !slices.Contains(perfFaultKinds, f.Kind) {
			return nil, badArg("--fault", "kind %v is not one of %s", f.Kind, faultKinds())
		}
	}
	o.faults = faults
	o.getenv, o.environ = os.Getenv, os.Environ
	return &o, nil
}

// checkRanks validates what depends on the team size, known only once the
// launcher (or -np) is: the arguments first, the same on every rank, then this
// process's environment, so that a launched rank never refuses its environment
// alone where the others refuse an argument (and leave without meeting it).
func (o *options) checkRanks(size int) error {
	if o.root < 0 || o.root >= size {
		return badArg("-r", "root %d is not a rank of the %d-rank team", o.root, size)
	}
	for r := range o.rankMem {
		if r >= size {
			return badArg("--rank-mem", "rank %d is not in the %d-rank team", r, size)
		}
	}
	for _, f := range o.faults {
		if f.Rank >= size {
			return badArg("--fault", "%v: rank %d is not in the %d-rank team", f, f.Rank, size)
		}
	}
	for _, c := range o.colls {
		if alg := o.algs[c]; alg != "" {
			if err := tlmlx5.Fits(c, alg, size); err != nil {
				return badArg("--alg", "%v %s: %v", c, alg, err)
			}
		}
	}
	return o.checkEnvAlgs(size)
}

// deviceOf is rank's device: --device may list several, taken in turn by
// local rank under a launcher that gives one (by rank otherwise), so ranks of
// one node spread over its NICs. An empty --device leaves the choice to
// coll.NewContext: $IBCOLL_DEVICE, else the HCA nearest to the local rank's GPU.
func (o *options) deviceOf(rank int) string {
	devs := strings.Split(o.device, ",")
	if o.launched && o.localRank >= 0 {
		rank = o.localRank
	}
	return strings.TrimSpace(devs[rank%len(devs)])
}

func (o *options) memOf(rank int) memPair {
	if m, ok := o.rankMem[rank]; ok {
		return m
	}
	return o.mem
}

// sizes lists the message sizes of the sweep.
func (o *options) sizes() []int64 {
	var out []int64
	elem := int64(max(1, o.dtype.Size()))
	s := o.minSize
	if s == 0 { // a row of empty collectives, then the sweep from one element
		out = append(out, 0)
		s = elem
	}
	// Sizes below one element would be rows of empty collectives that say they
	// moved bytes.
	// A row moves whole elements: its size is rounded down to them, so that the bytes
	// and bandwidth it reports are what moved.
	for s = max(s, elem); s <= o.maxSize; s *= o.factor {
		out = append(out, s-s%elem)
		if s > math.MaxInt64/o.factor {
			break
		}
	}
	return out
}

func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q (want a non-negative number with an optional K, M or G suffix)", s)
	}
	if v > (16<<30)/mult {
		return 0, fmt.Errorf("size %q is above the 16G limit", s)
	}
	return v * mult, nil
}

func parseMemType(s string) (mem.Type, error) {
	t, err := mem.ParseType(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("unknown memory type %q (valid: host, cuda, cuda-managed, dm, sim)", s)
	}
	return t, nil
}

func parseMemPair(s string) (memPair, error) {
	parts := strings.Split(s, ",")
	if len(parts) > 2 {
		return memPair{}, fmt.Errorf("%q: want SRC or SRC,DST", s)
	}
	src, err := parseMemType(parts[0])
	if err != nil {
		return memPair{}, err
	}
	dst := src
	if len(parts) == 2 {
		if dst, err = parseMemType(parts[1]); err != nil {
			return memPair{}, err
		}
	}
	return memPair{src, dst}, nil
}

func parseRankMem(s string) (map[int]memPair, error) {
	out := map[int]memPair{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, item := range strings.Split(s, ";") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		rs, spec, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("%q: want R:SRC,DST", item)
		}
		r, err := strconv.Atoi(strings.TrimSpace(rs))
		if err != nil || r < 0 {
			return nil, fmt.Errorf("%q: rank %q is not a non-negative number", item, rs)
		}
		if _, dup := out[r]; dup {
			return nil, fmt.Errorf("rank %d given twice", r)
		}
		if out[r], err = parseMemPair(spec); err != nil {
			return nil, fmt.Errorf("rank %d: %v", r, err)
		}
	}
	return out, nil
}

func collNames() []string {
	var s []string
	for _, c := range coll.CollTypes() {
		s = append(s, c.String())
	}
	return s
}

func dtypeNames() []string {
	var s []string
	for _, d := range coll.DTypes() {
		s = append(s, d.String())
	}
	return s
}

func opNames() []string {
	var s []string
	for _, o := range coll.Ops() {
		s = append(s, o.String())
	}
	return s
}

// writable checks, before the run, that a file can be created at path (its
// directory exists and may be written, and path is no directory), so that an
// output flag fails at once instead of after the whole sweep. "" is fine.
func writable(path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%s: cannot write in %s: %w", path, dir, err)
	}
	return nil
}

// distinctOutputs refuses two output flags that name one file: the later writer would
// silently replace what the earlier one wrote.
func distinctOutputs(files map[string]string) error {
	seen := map[string]string{}
	for _, flag := range []string{"--plot", "--cpuprofile", "--trace"} {
		f := files[flag]
		if f == "" {
			continue
		}
		key := filepath.Clean(f)
		if abs, err := filepath.Abs(f); err == nil {
			key = abs
		}
		if other, ok := seen[key]; ok {
			return badArg(flag, "%q is also %s's file: one would overwrite the other", f, other)
		}
		seen[key] = flag
	}
	return nil
}

// shared renders the options that every rank of a launched run must have alike: those
// the collectives, their sizes and the rows depend on. Memory types (an asymmetric run
// may give each rank its own -m through a wrapper), --device and the output files may
// differ.
func (o *options) shared() string {
	algs := make([]string, 0, len(o.algs))
	for c, a := range o.algs {
		algs = append(algs, fmt.Sprintf("%v=%s", c, a))
	}
	slices.Sort(algs)
	return fmt.Sprintf("-c %v -b %d -e %d -f %d -n %d -w %d -d %v -o %v -r %d -p=%v -i=%v --check=%v --sync=%v --alg %s --fault %v --all-or-nothing=%v --timeout %v",
		o.colls, o.minSize, o.maxSize, o.factor, o.iters, o.warmup, o.dtype, o.op, o.root, o.persistent, o.inPlace,
		o.check, o.sync, strings.Join(algs, ","), o.faults, o.allOrNothing, o.timeout)
}
