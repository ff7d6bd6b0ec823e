package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/plot"
	"github.com/ibcoll/ibcoll/reduce"
)

// reporter prints on rank 0: a header per collective, a row per size, a
// progress line on a terminal, and at the end the JSON document and plot.
type reporter struct {
	o        *options
	out      io.Writer
	errOut   io.Writer
	tty      bool
	ranks    int
	device   string
	provider string
	memDesc  string
	doc      jsonDoc
	series   map[coll.CollType]*plot.Series
	order    []coll.CollType
	failures []string
	// needHeader: the current collective's column header is still to be printed.
	needHeader bool
	// needStaging: the current collective's staging lines wait for its first row
	// that moves bytes (-b 0's empty row stages nothing, whatever the others do).
	needStaging bool
}

type jsonRow struct {
	Collective string  `json:"collective"`
	Alg        string  `json:"algorithm"`
	Count      int     `json:"count"`
	Bytes      int64   `json:"bytes"`
	AvgUS      float64 `json:"time_avg_us"`
	MinUS      float64 `json:"time_min_us"`
	MaxUS      float64 `json:"time_max_us"`
	// P50US is the median: on a shared or emulated machine a few descheduled
	// iterations set the average, not the median.
	P50US float64 `json:"time_p50_us"`
	// RankMaxUS is the slowest rank's mean time per iteration (each rank's times
	// averaged, then the largest): what ucc_perftest and the OSU benchmarks report.
	// It is at most AvgUS, the mean of each iteration's slowest rank.
	RankMaxUS float64 `json:"time_rank_max_us"`
	BusBW     float64 `json:"busbw_gbps"`
	Check     string  `json:"check"`
	// StagedBytes is what staging copied per iteration, summed over ranks: 0 when
	// every buffer is used in place.
	StagedBytes int64    `json:"staged_bytes"`
	Staging     []string `json:"staging,omitempty"` // per rank, how its buffers are staged
	// stagingOf is each rank's description alone ("" for none), for the table's
	// header, which gives each description once with the ranks it applies to.
	stagingOf []string
	Errors    []string `json:"errors,omitempty"`
}

type jsonDoc struct {
	Ranks      int    `json:"ranks"`
	Device     string `json:"device"`
	Provider   string `json:"provider"`
	Memory     string `json:"memory"`
	DType      string `json:"dtype"`
	Op         string `json:"op"`
	Iterations int    `json:"iterations"`
	Warmup     int    `json:"warmup"`
	Persistent bool   `json:"persistent"`
	InPlace    bool   `json:"in_place"`
	Root       int    `json:"root"`
	// Seed is --check's data seed (--seed, else drawn from the clock): a failed
	// check is reproduced with it.
	Seed uint64 `json:"seed"`
	// LinedUp: the ranks line up (an untimed barrier) before every iteration
	// (--sync, --check), not only before a size's first.
	LinedUp bool `json:"lined_up"`
	// AllOrNothing: every post ends alike on every rank (coll.Config.AllOrNothing),
	// and AllOrNothingFrom says what turned it on: "--all-or-nothing",
	// "$IBCOLL_ALL_OR_NOTHING" or "--fault".
	AllOrNothing     bool   `json:"all_or_nothing"`
	AllOrNothingFrom string `json:"all_or_nothing_from,omitempty"`
	// ReduceKernels names the reduction kernels this process runs (reduce.Kernels).
	ReduceKernels string    `json:"reduce_kernels"`
	Rows          []jsonRow `json:"rows"`
}

func (o *options) memDescription(size int) string {
	s := "src " + o.mem.src.String() + ", dst " + o.mem.dst.String()
	if len(o.rankMem) > 0 {
		var ranks []int
		for r := range o.rankMem {
			ranks = append(ranks, r)
		}
		sort.Ints(ranks)
		var parts []string
		for _, r := range ranks {
			parts = append(parts, fmt.Sprintf("rank %d: %v", r, o.rankMem[r]))
		}
		s += " (" + strings.Join(parts, "; ") + ")"
	}
	return s
}

func newReporter(o *options, ranks int, device, provider string) *reporter {
	r := &reporter{o: o, out: os.Stdout, errOut: os.Stderr, ranks: ranks, device: device, provider: provider,
		tty: isTerminal(os.Stderr) && !o.quiet && !o.json, series: map[coll.CollType]*plot.Series{}}
	r.memDesc = o.memDescription(ranks)
	r.doc = jsonDoc{Ranks: ranks, Device: device, Provider: provider, Memory: r.memDesc, DType: o.dtype.String(),
		Op: o.op.String(), Iterations: o.iters, Warmup: o.warmup, Persistent: o.persistent, InPlace: o.inPlace,
		Root: o.root, Seed: o.seed, LinedUp: o.check || o.sync, ReduceKernels: reduce.Kernels()}
	r.doc.AllOrNothingFrom = o.allOrNothingFrom()
	r.doc.AllOrNothing = r.doc.AllOrNothingFrom != ""
	return r
}

func (r *reporter) begin(c coll.CollType) {
	if r.o.json {
		return
	}
	mode := []string{}
	if r.o.persistent {
		mode = append(mode, "persistent")
	}
	if r.o.inPlace {
		mode = append(mode, "in-place")
	}
	if len(mode) == 0 {
		mode = append(mode, "non-persistent")
	}
	if from := r.o.allOrNothingFrom(); from != "" {
		// It adds a completion agreement to every post: the times are not the
		// default mode's.
		mode = append(mode, "all-or-nothing (from "+from+")")
	}
	// checkRanks has already accepted the environment.
	cfg, _ := r.o.config(0)
	alg, from := r.o.algOf(c, cfg)
	switch {
	case alg == "":
		alg = "default (by size, see the alg column)"
	case from != "--alg":
		alg += " (from " + from + ")"
	}
	fmt.Fprintf(r.out, "\n# collective %s, algorithm %s, %s\n", c, alg, strings.Join(mode, ", "))
	fmt.Fprintf(r.out, "# memory %s\n", r.memDesc)
	// The operator and the root where the collective has them.
	what := ""
	if c.IsReduction() {
		what += ", op " + r.o.op.String()
	}
	if c.IsRooted() {
		what += fmt.Sprintf(", root %d", r.o.root)
	}
	fmt.Fprintf(r.out, "# dtype %s%s, %d iterations (+%d warm-up), %d ranks, device %s (%s)\n",
		r.o.dtype, what, r.o.iters, r.o.warmup, r.ranks, r.device, r.provider)
	timed := "init+post+wait"
	if r.o.persistent {
		timed = "post+wait"
	}
	if r.o.check || r.o.sync {
		timed += ", ranks lined up before each (untimed barrier)"
	}

	fmt.Fprintf(r.out, "# time per iteration: %s, slowest rank; bus bandwidth from the average\n", timed)
	if r.o.warmup == 0 {
		fmt.Fprintf(r.out, "# no warm-up (-w 0): the first timed iteration includes connecting to the peers it is the first to talk to\n")
	}
	if c.IsReduction() {
		fmt.Fprintf(r.out, "# reduction kernels: %s (chosen at start from this CPU's features)\n", reduce.Kernels())
	}
	// The staging lines and the column header wait for the first row: how each rank's
	// buffers are staged is what its requests report.
	r.needHeader, r.needStaging = true, true
}

// header prints, before a collective's first row that moves bytes, how each rank's
// buffers are staged (its requests' own report, at that size), and the column header
// before its first row.
func (r *reporter) header(jr *jsonRow) {
	if r.needStaging && jr.Bytes > 0 && len(jr.Staging) > 0 {
		r.needStaging = false
		fmt.Fprintf(r.out, "# staging (at %d bytes; the scratch scales with the size):\n", jr.Bytes)
		for _, s := range byRanks(jr.stagingOf) {
			fmt.Fprintf(r.out, "#   %s\n", s)
		}
	}
	if !r.needHeader {
		return
	}
	r.needHeader = false
	fmt.Fprintf(r.out, "%12s %12s %14s %12s %12s %12s %12s %10s %12s  %s\n", "count", "bytes", "alg", "avg µs", "min µs", "max µs", "p50 µs", "busbw GB/s", "staged B", "check")
}

// byRanks gives each distinct description of descs (indexed by rank; "" for none)
// once, after the ranks that have it ("rank 3: ...", "ranks 0-2,4-1023: ..."), in the
// order of their first rank: at -np 1024 the header was 1024 lines of "nothing staged".
func byRanks(descs []string) []string {
	var order []string
	ranks := map[string][]int{}
	for r, d := range descs {
		if d == "" {
			continue
		}
		if _, ok := ranks[d]; !ok {
			order = append(order, d)
		}
		ranks[d] = append(ranks[d], r)
	}
	out := make([]string, 0, len(order))
	for _, d := range order {
		rs := ranks[d]
		var b strings.Builder
		if len(rs) == 1 {
			b.WriteString("rank ")
		} else {
			b.WriteString("ranks ")
		}
		for i := 0; i < len(rs); {
			j := i
			for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
				j++
			}
			if i > 0 {
				b.WriteByte(',')
			}
			if j > i {
				fmt.Fprintf(&b, "%d-%d", rs[i], rs[j])
			} else {
				fmt.Fprintf(&b, "%d", rs[i])
			}
			i = j + 1
		}
		out = append(out, b.String()+": "+d)
	}
	return out
}

func (r *reporter) progress(c coll.CollType, size int64, i, n int) {
	if r.tty {
		fmt.Fprintf(r.errOut, "\r\033[K[%d/%d] %s %s ...", i+1, n, c, plot.SizeLabel(float64(size)))
	}
}

func (r *reporter) clearProgress() {
	if r.tty {
		fmt.Fprint(r.errOut, "\r\033[K")
	}
}

// busFactor converts algorithm bandwidth to bus bandwidth, as nccl-tests
// do, so that numbers are comparable across team sizes.
func busFactor(c coll.CollType, n int) float64 {
	f := float64(n-1) / float64(max(n, 1))
	switch c {
	case coll.Gather, coll.Gatherv, coll.Scatter, coll.Scatterv, coll.Allgather, coll.Allgatherv, coll.Alltoall, coll.Alltoallv,
		coll.ReduceScatter:
		return f
	case coll.Allreduce:
		return 2 * f
	}
	return 1
}

// checksData says whether --check compares anything in a row: a barrier has no data,
// and an empty row of a collective without gaps has no byte to compare ("-", where it
// said "ok" for a check that compared nothing). The gaps of gatherv's root and of every
// rank of allgatherv and alltoallv must stay untouched even in -b 0's row; scatterv's
// outputs are single blocks.
func checksData(c coll.CollType, size int64) bool {
	switch c {
	case coll.Barrier:
		return false
	case coll.Gatherv, coll.Allgatherv, coll.Alltoallv:
		return true
	}
	return size > 0
}

// moved is the bytes an iteration is charged for, per rank as nccl-tests charges
// them: all blocks for the collectives that move one block per rank (reduce_scatter:
// the whole vector, n blocks; alltoall: the n blocks each rank sends), the vector
// otherwise. The v-collectives are charged their nominal block, so that they compare
// with their fixed-size kin.
func moved(c coll.CollType, block int64, n int) int64 {
	switch c {
	case coll.Gather, coll.Gatherv, coll.Scatter, coll.Scatterv, coll.Allgather, coll.Allgatherv, coll.ReduceScatter,
		coll.Alltoall, coll.Alltoallv:
		return block * int64(n)
	case coll.Barrier:
		return 0
	}
	return block
}

func (r *reporter) row(c coll.CollType, count int, size int64, rows []sizeResult) {
	r.clearProgress()
	jr := jsonRow{Collective: c.String(), Count: count, Bytes: size, Check: "-"}
	var compared int64
	for _, x := range rows {
		compared += x.Compared
	}
	// "ok" only where some rank compared bytes: a team of one whose only rank has no
	// output (a bcast root, an in-place scatter) checked nothing.
	if r.o.check && checksData(c, size) && compared > 0 {
		jr.Check = "ok"
	}
	iters := 0
	for _, x := range rows {
		iters = max(iters, len(x.Times))
		if jr.Alg == "" {
			jr.Alg = x.Alg
		}
	}
	var perIter []float64 // slowest rank per iteration
	for i := 0; i < iters; i++ {
		m := 0.0
		for _, x := range rows {
			if i < len(x.Times) {
				m = math.Max(m, float64(x.Times[i]))
			}
		}
		perIter = append(perIter, m)
	}
	jr.stagingOf = make([]string, len(rows))
	for rank, x := range rows {
		jr.StagedBytes += x.Staged
		jr.stagingOf[rank] = x.Staging
		if x.Staging != "" {
			jr.Staging = append(jr.Staging, fmt.Sprintf("rank %d: %s", rank, x.Staging))
		}
		if x.Err != "" {
			jr.Errors = append(jr.Errors, fmt.Sprintf("rank %d: %s", rank, x.Err))
		}
		if x.Mismatch != "" {
			jr.Check = "FAIL"
			jr.Errors = append(jr.Errors, "check: "+x.Mismatch)
		}
	}
	if len(jr.Errors) > 0 && jr.Check != "FAIL" {
		jr.Check = "error"
	}
	if len(perIter) > 0 {
		sum, lo, hi := 0.0, math.Inf(1), 0.0
		for _, v := range perIter {
			sum += v
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		avg := sum / float64(len(perIter))
		jr.AvgUS, jr.MinUS, jr.MaxUS = avg/1e3, lo/1e3, hi/1e3
		jr.P50US = median(perIter) / 1e3
		for _, x := range rows {
			if len(x.Times) > 0 {
				sum := 0.0
				for _, v := range x.Times {
					sum += float64(v)
				}
				jr.RankMaxUS = max(jr.RankMaxUS, sum/float64(len(x.Times))/1e3)
			}
		}
		if avg > 0 {
			jr.BusBW = float64(moved(c, size, r.ranks)) / avg * busFactor(c, r.ranks)
		}
	}
	r.doc.Rows = append(r.doc.Rows, jr)
	if len(jr.Errors) == 0 && c != coll.Barrier {
		s := r.series[c]
		if s == nil {
			s = &plot.Series{Name: c.String()}
			r.series[c] = s
			r.order = append(r.order, c)
		}
		s.X = append(s.X, float64(size))
		s.Y = append(s.Y, jr.BusBW)
	}
	r.failures = append(r.failures, jr.Errors...)
	if r.o.json {
		return
	}
	alg := jr.Alg
	if alg == "" {
		alg = "-"
	}
	r.header(&jr)
	if len(perIter) == 0 {
		fmt.Fprintf(r.out, "%12d %12d %14s %12s %12s %12s %12s %10s %12s  %s\n", count, size, alg, "-", "-", "-", "-", "-", "-", jr.Check)
	} else {
		fmt.Fprintf(r.out, "%12d %12d %14s %12.2f %12.2f %12.2f %12.2f %10.3f %12d  %s\n", count, size, alg, jr.AvgUS, jr.MinUS, jr.MaxUS, jr.P50US, jr.BusBW, jr.StagedBytes, jr.Check)
	}
	for _, e := range jr.Errors {
		fmt.Fprintf(r.out, "#   %s\n", e)
	}
}

// median of xs (the mean of the middle two for an even count); xs is left as it was.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func (r *reporter) end(coll.CollType) { r.clearProgress() }

func (r *reporter) fatal(err error) {
	r.clearProgress()
	fmt.Fprintln(r.errOut, "ibcoll-perf:", err)
}

// finish writes the JSON document and the plot.
func (r *reporter) finish(elapsed time.Duration) error {
	r.clearProgress()
	if r.o.json {
		enc := json.NewEncoder(r.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r.doc); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(r.out, "\n# done in %.1f s\n", elapsed.Seconds())
	}
	if r.o.plot == "" {
		return nil
	}
	ch := plot.Chart{
		Title:  fmt.Sprintf("ibcoll-perf: %d ranks, %s (%s), %s", r.ranks, r.device, r.provider, r.memDesc),
		XLabel: "message size (bytes)", YLabel: "bus bandwidth GB/s",
	}
	for _, c := range r.order {
		ch.Series = append(ch.Series, *r.series[c])
	}
	if len(ch.Series) == 0 {
		return fmt.Errorf("--plot %s: no successful rows to plot; no file written", r.o.plot)
	}
	// Drawn in memory first: a chart that cannot be drawn leaves no empty file.
	var img bytes.Buffer
	if err := plot.Write(&img, r.o.plot, ch); err != nil {
		return fmt.Errorf("--plot %s: %w; no file written", r.o.plot, err)
	}
	if err := os.WriteFile(r.o.plot, img.Bytes(), 0o644); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if !r.o.json {
		fmt.Fprintf(r.out, "# plot written to %s\n", r.o.plot)
	}
	return nil
}
