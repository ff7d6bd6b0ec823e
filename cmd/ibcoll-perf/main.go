// Command ibcoll-perf validates and times ibcoll's collectives, in the
// manner of ucc_perftest: a sweep of message sizes per collective, with
// per-rank memory types (asymmetric buffers), data checks against a
// reference, fault injection, and a plot.
//
// Ranks are goroutines of this process on the default device, soft0 where
// there is no RDMA NIC (-np N, the default when no launcher is found), or
// processes started by a launcher (mpirun, srun, torchrun-style or IBCOLL_*
// variables) that meet through a TCP store.
//
// Exit status: 0 success, 1 a data check failed, 2 bad arguments or environment,
// a --fault that never fired (named, with why; this takes precedence), or an
// output (--json, --plot) that could not be written, 3 a collective failed (a peer
// failed, a timeout, an injected fault). Under a launcher each process exits with
// its own rank's status: a fault that never fired is known to its rank only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5" // registers the transport, and its defaults are told
	"github.com/ibcoll/ibcoll/verbs"
)

const (
	exitOK         = 0
	exitCheck      = 1
	exitUsage      = 2
	exitCollective = 3
)

func main() { os.Exit(run(os.Args[1:])) }

// maxJSONSeed is the largest integer that a double holds exactly.
const maxJSONSeed = 1<<53 - 1

func run(args []string) int {
	o, err := parseOptions(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ibcoll-perf:", err)
		return exitUsage
	}
	if o.seed == 0 {
		// At most 2^53-1, so that a JSON reader that keeps numbers as doubles (jq,
		// JavaScript) reads back the seed that replays the run.
		o.seed = uint64(time.Now().UnixNano()) & maxJSONSeed
		if o.seed == 0 {
			o.seed = 1
		}
	}
	l, err := detectLauncher(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ibcoll-perf:", err)
		return exitUsage
	}
	for _, rec := range []struct {
		path, flag string
		start      func(string) (func(), error)
	}{{o.cpuProfile, "--cpuprofile", startProfile}, {o.trace, "--trace", startTrace}} {
		if rec.path == "" {
			continue
		}
		path := rec.path
		if l != nil {
			path = fmt.Sprintf("%s.rank%d", path, l.Rank)
		}
		stop, err := rec.start(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ibcoll-perf: %s: %v\n", rec.flag, err)
			return exitUsage
		}
		defer stop()
	}
	if l != nil {
		return runLaunched(o, l)
	}
	if o.np == 0 {
		o.np = 2
	}
	return runLocal(o)
}

// deviceName resolves the device the ranks will open, for the header, and
// says how much device memory it has (0: none, or unknown).
func deviceName(name string) (string, string, uint64) {
	ctx, err := verbs.Open(name)
	if err != nil {
		return name, "?", 0
	}
	defer ctx.Close()
	var maxDM uint64
	if attr, err := ctx.Query(); err == nil {
		maxDM = attr.MaxDMSize
	}
	return ctx.Name(), ctx.Provider(), maxDM
}

// pathHeader says which QP path settings the environment gave (traffic class,
// service level, partition key index), where any is set: they decide which
// priority of a RoCE fabric carries the run.
func pathHeader(cfg coll.Config) {
	if cfg.TrafficClass == 0 && cfg.ServiceLevel == 0 && cfg.PKeyIndex == 0 {
		return
	}
	fmt.Printf("# path: traffic class %d ($%s), service level %d ($%s), partition key index %d ($%s)\n",
		cfg.TrafficClass, coll.TrafficClassEnv, cfg.ServiceLevel, coll.ServiceLevelEnv, cfg.PKeyIndex, coll.PKeyIndexEnv)
}

// gpuDirectHeader says, when some rank uses GPU memory, how this GPU orders the NIC's
// writes into it and so whether the transport flushes them after a collective whose
// output the NIC writes directly (mem.FlushGPUDirectWrites).
func gpuDirectHeader(o *options) {
	if !o.usesGPU() || o.json {
		return
	}
	g, err := mem.GPUDirectWriteOrdering()
	if err != nil {
		fmt.Printf("# gpudirect: write ordering not read: %v\n", err)
		return
	}
	order := map[int]string{-1: "unknown (a driver before CUDA 11.3)", 0: "none", 100: "for the owning GPU", 200: "for all devices"}[g.Ordering]
	if order == "" {
		order = "unknown"
	}
	then := "no flush needed"
	switch {
	case g.NeedsFlush() && g.CanFlush:
		then = "flushed after each collective whose output the NIC writes directly"
	case g.NeedsFlush():
		then = "the host cannot flush them: not flushed"
	}
	fmt.Printf("# gpudirect: NIC writes into GPU memory ordered %s (CUDA attribute 118 = %d), host flush %v: %s\n",
		order, g.Ordering, g.CanFlush, then)
}

// dmHeader says what each rank's context may take of its device's memory, and
// how the transport copies out of it, when some rank uses dm buffers.
func dmHeader(o *options, maxDM uint64, cfg coll.Config) {
	if o.usesDM() && !o.json {
		share := fmt.Sprintf("up to %d bytes", o.dmCapacity)
		if o.dmCapacity == 0 {
			// No share was set (under a launcher that gives no local size, the ranks
			// per device are unknown): the transport's default, first come first served.
			share = fmt.Sprintf("up to the transport's default of %d bytes (no local size from the launcher, so the device's memory is not split; first come first served)",
				tlmlx5.DefaultDMCapacity)
		}
		fmt.Printf("# dm: each rank's context takes %s of its device's %d (dm buffers, DM staging scratch); %s\n",
			share, maxDM, dmCopies(cfg))
	}
}

// dmCopies says how the transport copies out of the device's memory: through the
// NIC where the device reports that the CPU reads it uncached (verbs.DeviceAttr).
func dmCopies(cfg coll.Config) string {
	ctx, err := verbs.OpenWith(coll.PlacedDevice(cfg), verbs.Options{SoftDMUncached: cfg.SoftDMUncached})
	if err != nil {
		return "copies out of it: not known (" + err.Error() + ")"
	}
	defer ctx.Close()
	attr, err := ctx.Query()
	switch {
	case err != nil:
		return "copies out of it: not known (" + err.Error() + ")"
	case attr.DMUncachedReads:
		return "copies out of it go through the NIC (a loopback QP: the CPU reads it uncached), a reduction's dm source too, into host memory at every post"
	}
	return "copies out of it are the CPU's (it reads as cached memory); a reduction's dm source is staged"
}

// runLocal runs o.np ranks as goroutines of this process.
func runLocal(o *options) int {
	err := o.checkRanks(o.np)
	// Ranks take --device's entries in turn: each distinct entry is checked once.
	for r := 0; err == nil && r < min(o.np, strings.Count(o.device, ",")+1); r++ {
		err = o.checkDevice(r)
	}
	for r := 0; err == nil && r < o.np; r++ {
		err = o.checkCUDA(r)
	}
	if err == nil {
		err = checkLocalMemory(o, o.np)
	}
	if err == nil {
		if perr := writable(o.plot); perr != nil {
			err = badArg("--plot", "%v", perr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ibcoll-perf:", err)
		return exitUsage
	}
	cfg, _ := o.config(0) // checkRanks has accepted the environment
	dev, prov, maxDM := deviceName(coll.PlacedDevice(cfg))
	if strings.Contains(o.device, ",") {
		dev = o.device
	}
	o.shareDM(maxDM, o.ranksPerDevice(o.np))
	rep := newReporter(o, o.np, dev, prov)
	if !o.json {
		fmt.Printf("# ibcoll-perf: %d ranks in this process on %s (%s); --check seed %d\n", o.np, dev, prov, o.seed)
		pathHeader(cfg)
		gpuDirectHeader(o)
	}
	dmHeader(o, maxDM, cfg)
	start := time.Now()
	ref := newReference(o.seed, o.dtype, o.op, o.np)
	oobs := coll.LocalOOB(o.np)
	codes := make([]int, o.np)
	faults := make([][]faultOutcome, o.np)
	closes := make([]time.Duration, o.np)
	var wg sync.WaitGroup
	for r := range o.np {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rp *reporter
			if r == 0 {
				rp = rep
			}
			codes[r], faults[r], closes[r] = runRank(o, oobs[r], ref, rp)
		}()
	}
	wg.Wait()
	reportSlowClose(0, closes)
	code := exitOK
	for _, c := range codes {
		code = max(code, c)
	}
	if err := rep.finish(time.Since(start)); err != nil {
		fmt.Fprintln(os.Stderr, "ibcoll-perf:", err)
		if code == exitOK {
			// The output (JSON, --plot) could not be written. After failed rows,
			// their status stands: a plot of nothing is their consequence.
			code = exitUsage
		}
	}
	return reportUnfired(o, faults, code, true)
}

// runRank is one rank's whole life: context, team, sweep, teardown. The
// context and team are agreed on through the OOB first, so a rank that
// cannot even open its device makes every rank stop instead of waiting. It
// returns the exit status and what the rank saw of the --faults for it.
func runRank(o *options, oob coll.OOB, ref *reference, rep *reporter) (int, []faultOutcome, time.Duration) {
	rank, size := oob.Rank(), oob.Size()
	ctx := context.Background()
	cfg, err := o.config(rank)
	var cctx *coll.Context
	if err == nil {
		cctx, err = coll.NewContext(cfg)
	}
	status := []byte("ok")
	if err == nil {
		status = append(status, "\t"+placementLine(rank, cctx)...)
	} else {
		status = []byte(fmt.Sprintf("rank %d: %v", rank, err))
	}
	actx, cancel := context.WithTimeout(ctx, o.timeout)
	all, aerr := oob.Allgather(actx, status)
	cancel()
	if aerr != nil || err != nil || anyFailed(all) {
		if rep != nil {
			rep.fatal(fmt.Errorf("opening the device: %v", firstFailure(all, aerr, err)))
		}
		if cctx != nil {
			_ = cctx.Close()
		}
		return exitCollective, nil, 0
	}
	defer func() {
		if err := cctx.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: closing the context: %v\n", rank, err)
		}
	}()
	if rep != nil && !o.json {
		descs := make([]string, len(all)) // "rank N: where" without "rank N: "
		for r, b := range all {
			_, line, _ := strings.Cut(string(b), "\t")
			_, descs[r], _ = strings.Cut(line, ": ")
		}
		for _, line := range byRanks(descs) {
			fmt.Println("# " + line)
		}
	}
	holdAt("team")
	tctx, cancel := context.WithTimeout(ctx, o.timeout)
	created := time.Now()
	team, err := cctx.NewTeam(tctx, oob)
	took := time.Since(created)
	cancel()
	if err != nil {
		if rep != nil {
			rep.fatal(fmt.Errorf("creating the team: %w", err))
		} else {
			// Rank 0 reports for all, but it may be the rank that is gone.
			fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: creating the team: %v\n", rank, err)
		}
		return exitCollective, nil, 0
	}
	holdAt("init")
	rr := &rankRunner{o: o, rank: rank, size: size, cctx: cctx, team: team, ref: ref, rep: rep, mem: o.memOf(rank)}
	code := rr.sweep(ctx, oob)
	if code == exitOK {
		// After a failure a peer may be gone for good (killed): no more rounds.
		linkSummary(ctx, o, oob, team, rr.lineUpLinks, took, rep)
	}
	faults := rankFaults(o, team, rank, code == exitCollective)
	closing := time.Now()
	if err := team.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: closing the team: %v\n", rank, err)
		code = max(code, exitCollective)
	}
	return code, faults, time.Since(closing)
}

// slowClose is how long a Team.Close takes before the tool says so.
const slowClose = 100 * time.Millisecond

// reportSlowClose says, once for the ranks of this process, how long the slowest
// Team.Close took when one took slowClose or more: Close waits for what a rank still
// owes its peers, and a long wait is worth seeing (over rxe one run in seven had a
// rank wait 2 s there, before the drain cut off peers that had closed).
// took[i] is rank first+i's.
func reportSlowClose(first int, took []time.Duration) {
	slowest, slow := 0, 0
	for r, d := range took {
		if d > took[slowest] {
			slowest = r
		}
		if d >= slowClose {
			slow++
		}
	}
	switch {
	case slow == 0:
	case len(took) == 1:
		fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: closing the team took %.2f s\n", first, took[0].Seconds())
	default:
		fmt.Fprintf(os.Stderr, "ibcoll-perf: closing the team took up to %.2f s (rank %d); %d of %d ranks took %v or more\n",
			took[slowest].Seconds(), first+slowest, slow, len(took), slowClose)
	}
}

// holdAt is a test hook (multiproc_test.go): the tool's tests stop a process at a
// phase ("team": before NewTeam; "init": before the first collective) to kill it
// there. It does nothing in the tool.
var holdAt = func(phase string) {}

// placementLine says which HCA and GPU the rank uses, and why, for the
// header.
func placementLine(rank int, cctx *coll.Context) string {
	p := cctx.Placement()
	dev := p.Device
	if dev == "" {
		dev, _, _ = deviceName("")
	}
	why := map[string]string{"Config.Device": "named", "topology": "nearest to its GPU, " + p.Relation,
		"default": "default device"}[p.DeviceFrom]
	gpu := "no GPU"
	if p.GPU >= 0 {
		gpu = fmt.Sprintf("GPU %d (%s), CUDA device %d", p.GPU, p.GPUPCI, p.CUDADevice)
	}
	return fmt.Sprintf("rank %d: HCA %s (%s), %s", rank, dev, why, gpu)
}

func anyFailed(all [][]byte) bool {
	for _, b := range all {
		if s := string(b); s != "ok" && !strings.HasPrefix(s, "ok\t") {
			return true
		}
	}
	return false
}

func firstFailure(all [][]byte, errs ...error) error {
	for _, b := range all {
		if s := string(b); s != "ok" && !strings.HasPrefix(s, "ok\t") {
			return errors.New(string(b))
		}
	}
	return errors.Join(errs...)
}

// linkSummary prints, after a sweep without failure, on the reporting rank, the connections the ranks made (queue
// pairs, over a lazy wire-up only to the peers their collectives used), how many of
// them the tool's own line-up barrier made first (lineUp, the rank's count once its
// first line-up was done), and how long team creation took, slowest rank first: one
// small OOB round.
func linkSummary(ctx context.Context, o *options, oob coll.OOB, team *coll.Team, lineUp int, took time.Duration, rep *reporter) {
	mine := fmt.Sprintf("%d %d %d", team.Links(), lineUp, took.Microseconds())
	actx, cancel := context.WithTimeout(ctx, min(o.timeout, 10*time.Second))
	all, err := oob.Allgather(actx, []byte(mine))
	cancel()
	if rep == nil || o.json {
		return
	}
	if err != nil {
		fmt.Printf("# connections per rank: not collected (%v)\n", err)
		return
	}
	var links, barrier spread
	slow := int64(0)
	for _, b := range all {
		var l, bl int
		var us int64
		if _, err := fmt.Sscanf(string(b), "%d %d %d", &l, &bl, &us); err != nil {
			return
		}
		links.add(l)
		barrier.add(bl)
		slow = max(slow, us)
	}
	fmt.Printf("# connections per rank: %s (of %d peers), of which this tool's line-up barrier made %s first; team creation %.3f s (slowest rank)\n",
		links, len(all)-1, barrier, float64(slow)/1e6)
}

// spread is the least, most and mean of some counts.
type spread struct{ lo, hi, sum, n int }

func (s *spread) add(v int) {
	if s.n == 0 || v < s.lo {
		s.lo = v
	}
	s.hi = max(s.hi, v)
	s.sum += v
	s.n++
}

func (s spread) String() string {
	return fmt.Sprintf("min %d, max %d, mean %.1f", s.lo, s.hi, float64(s.sum)/float64(max(s.n, 1)))
}
