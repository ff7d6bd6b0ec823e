package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ibcoll/ibcoll/bootstrap"
	"github.com/ibcoll/ibcoll/coll"
)

// detectLauncher finds a launcher's environment (IBCOLL_*, torchrun, Open
// MPI, PMI, Slurm, in that order). nil means none, or -np was given, which
// always means in-process ranks.
//
// A launcher whose variables place the process in the job but not on its node
// (a malformed local rank) gives the Env, and o.misplaced says why: the rank still
// meets the others to tell them why it stops (runLaunched).
func detectLauncher(o *options) (*bootstrap.Env, error) {
	if o.npSet {
		return nil, nil
	}
	env, ok, err := bootstrap.Detect(os.Getenv)
	if err != nil && env.Store != "" {
		o.misplaced = &usageError{msg: "launcher environment: " + err.Error(), env: true}
		return &env, nil
	}
	if err != nil {
		return nil, fmt.Errorf("launcher environment: %w", err)
	}
	if !ok {
		return nil, nil
	}
	return &env, nil
}

// runLaunched is one process of a multi-process run: it meets the others
// through the TCP store (rank 0 serves it unless IBCOLL_STORE_EXTERNAL=1)
// and runs one rank.
func runLaunched(o *options, env *bootstrap.Env) int {
	// Arguments are the same on every rank: each refuses them at once, and rank 0
	// says so. A rank that refuses its own environment (its device, or rank 0's
	// --plot path), which may be its alone, says so at once and still meets the
	// others, so that every rank ends at once with rank 0 saying who refused what,
	// instead of the others waiting out their timeout for a rank that left. It
	// waits for them at most refusedWait: past that, the others' own timeouts end
	// them.
	o.launched, o.localRank = true, env.LocalRank // deviceOf takes --device's entries by local rank
	refused := o.checkRanks(env.Size)
	if o.misplaced != nil && (refused == nil || fromEnv(refused)) {
		refused = o.misplaced // the launcher's own variables, named as such
	}
	if refused == nil && env.Rank == 0 {
		if err := writable(o.plot); err != nil { // rank 0 alone writes it
			refused = &usageError{msg: "--plot: " + err.Error(), env: true}
		}
	}
	if refused == nil {
		refused = o.checkDevice(env.Rank)
	}
	if refused == nil {
		refused = o.checkCUDA(env.Rank)
	}
	if refused != nil && !fromEnv(refused) {
		if env.Rank == 0 {
			fmt.Fprintln(os.Stderr, "ibcoll-perf:", refused)
		}
		return exitUsage
	}
	// unmet ends a refusing rank that could not meet the others; rank 0, which says
	// its refusal with theirs, says it alone.
	unmet := func() int {
		if env.Rank == 0 {
			fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: %v\n", env.Rank, refused)
		}
		return exitUsage
	}
	meet := o.timeout + time.Minute
	if refused != nil {
		if env.Rank != 0 { // rank 0 says it with the others' below
			fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: %v\n", env.Rank, refused)
		}
		meet = min(meet, refusedWait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), meet)
	client, server, err := bootstrap.Connect(ctx, *env, bootstrap.ConnectOptions{})
	cancel()
	if err != nil {
		if refused != nil {
			return unmet()
		}
		fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: store %s (%s): %v\n", env.Rank, env.Store, env.Source, err)
		return exitCollective
	}
	defer func() {
		client.Close()
		if server != nil {
			// Rank 0 serves the store: closing it at once on a failure would
			// tell a rank still learning of that failure only that the store
			// was lost. Each other rank leaves within its own timeout.
			dctx, cancel := context.WithTimeout(context.Background(), o.timeout)
			if err := server.Drain(dctx); err != nil {
				fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: closing the store anyway: %v\n", env.Rank, err)
			}
			cancel()
			server.Close()
		}
	}()
	// Every rank uses the seed of rank 0, so the data checks agree.
	oob, err := coll.TCPOOB(client, env.Rank, env.Size)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ibcoll-perf:", err)
		return exitUsage
	}
	// With the seed goes what the collectives depend on, so that ranks given different
	// arguments are refused rather than run mismatched rows (a launcher passes the same
	// to every rank; a wrapper script may not).
	mine := []byte(fmt.Sprint(o.seed) + argsSep + o.shared())
	if refused != nil {
		mine = []byte(refusedTag + refused.Error())
	}
	sctx, cancel := context.WithTimeout(context.Background(), meet)
	seeds, err := oob.Allgather(sctx, mine)
	cancel()
	if err != nil {
		if refused != nil {
			return unmet()
		}
		fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: %v\n", env.Rank, err)
		return exitCollective
	}
	if lines := refusals(seeds); len(lines) > 0 {
		if env.Rank == 0 {
			for _, l := range lines {
				fmt.Fprintln(os.Stderr, "ibcoll-perf:", l)
			}
		}
		return exitUsage
	}
	if line := differentArgs(seeds); line != "" {
		if env.Rank == 0 {
			fmt.Fprintln(os.Stderr, "ibcoll-perf:", line)
		}
		return exitUsage
	}
	// Every rank formatted its own seed; one that does not parse came from a process
	// that is not this program, and its data would not match rank 0's checks.
	seed0, _, _ := strings.Cut(string(seeds[0]), argsSep)
	seed, err := strconv.ParseUint(seed0, 10, 64)
	if err != nil {
		if env.Rank == 0 {
			fmt.Fprintf(os.Stderr, "ibcoll-perf: rank 0's seed %q in the store is not a number: %v\n", seeds[0], err)
		}
		return exitCollective
	}
	o.seed = seed

	var rep *reporter
	cfg, _ := o.config(env.Rank) // checkRanks has accepted the environment
	dev, prov, maxDM := deviceName(coll.PlacedDevice(cfg))
	if strings.Contains(o.device, ",") {
		dev = o.device
	}
	if env.LocalSize > 0 {
		o.shareDM(maxDM, o.ranksPerDevice(env.LocalSize))
	}
	if env.Rank == 0 {
		rep = newReporter(o, env.Size, dev, prov)
		if !o.json {
			fmt.Printf("# ibcoll-perf: %d processes (%s, store %s), rank 0 on %s (%s); --check seed %d\n",
				env.Size, env.Source, env.Store, dev, prov, o.seed)
			pathHeader(cfg)
			gpuDirectHeader(o)
			dmHeader(o, maxDM, cfg)
		}
	}
	start := time.Now()
	code, faults, closeTook := runRank(o, oob, newReference(o.seed, o.dtype, o.op, env.Size), rep)
	reportSlowClose(oob.Rank(), []time.Duration{closeTook})
	if rep != nil {
		if err := rep.finish(time.Since(start)); err != nil {
			fmt.Fprintln(os.Stderr, "ibcoll-perf:", err)
			if code == exitOK {
				// The output (JSON, --plot) could not be written. After failed rows,
				// their status stands: a plot of nothing is their consequence.
				code = exitUsage
			}
		}
	}
	// Each process knows its own rank's faults only: each leaves them in the store
	// before the exit barrier and, once every rank entered it, reads the others', so
	// that a fault of every rank (KIND@*) that fired on one is not called unfired by
	// the rest.
	if len(o.faults) > 0 {
		if enc, err := encodeOutcomes(faults); err == nil {
			sctx, cancel := context.WithTimeout(context.Background(), o.timeout)
			_ = client.Set(sctx, faultsKey(env.Rank), enc)
			cancel()
		}
	}
	// Rank 0 serves the store: nobody leaves before everyone is done with it. Every
	// rank that got here enters, whatever its exit status: the statuses differ (a
	// fault that never fired, a failed Close, are one rank's), and a rank that left
	// without a word held the others here for the whole --timeout. A process that
	// died never comes: its death (the store's bootstrap.DiedKey, set for good) ends
	// the wait.
	bctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	go func() {
		if _, err := client.Get(bctx, bootstrap.DiedKey); err == nil {
			cancel()
		}
	}()
	berr := client.Barrier(bctx, "ibcoll-perf/exit", env.Size)
	cancel()
	all := [][]faultOutcome{faults}
	if berr == nil && len(o.faults) > 0 {
		// Every rank set its key before it entered: nothing here waits.
		gctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		for r := 0; r < env.Size; r++ {
			if r == env.Rank {
				continue
			}
			if v, err := client.Get(gctx, faultsKey(r)); err == nil {
				if fo, err := decodeOutcomes(v); err == nil {
					all = append(all, fo)
				}
			}
		}
		cancel()
	}
	// Every rank reaches the same verdict; rank 0 says it (a rank the barrier left
	// without the others' outcomes says its own).
	return reportUnfired(o, all, code, env.Rank == 0 || berr != nil)
}

// argsSep ends the seed in a rank's seed-exchange entry; its shared arguments follow.
const argsSep = "\x00"

// differentArgs names the first rank whose shared arguments differ from rank 0's, with
// both, or says nothing where they agree.
func differentArgs(entries [][]byte) string {
	_, first, _ := strings.Cut(string(entries[0]), argsSep)
	for r := 1; r < len(entries); r++ {
		_, args, _ := strings.Cut(string(entries[r]), argsSep)
		if args != first {
			return fmt.Sprintf("rank %d was given other arguments than rank 0: rank 0 runs %q, rank %d runs %q; every rank must be given the same (-m, --device and the output files may differ)",
				r, first, r, args)
		}
	}
	return ""
}

// faultsKey is where rank leaves its fault outcomes in the store.
func faultsKey(rank int) string { return fmt.Sprintf("ibcoll-perf/faults/%d", rank) }

// refusedWait bounds how long a rank that refused its environment waits to tell the
// others: it has said why already, and they end by their own timeouts otherwise.
const refusedWait = 30 * time.Second

// refusedTag starts the seed exchange's entry of a rank that refused its
// environment; the rest is its error.
const refusedTag = "refused: "

// refusals gives the seed exchange's refusals as lines for rank 0 to print, one
// per distinct error after the ranks that gave it ("ranks 0-15: -r: ...", "rank 3:
// environment: ...").
func refusals(entries [][]byte) []string {
	descs := make([]string, len(entries))
	for r, e := range entries {
		if d, ok := strings.CutPrefix(string(e), refusedTag); ok {
			descs[r] = d
		}
	}
	return byRanks(descs)
}
