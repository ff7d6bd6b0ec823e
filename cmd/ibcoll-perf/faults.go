package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
)

// A --fault that never fired leaves the user believing they tested a failure that did
// not happen (copyin@0 when rank 0's source is host memory, which the transport sends
// in place: nothing is copied in). After the sweep every rank reads its team's step
// counts; a fault that fired on no rank is reported, with why, and the run exits 2.

// faultOutcome is what one rank saw of one --fault that applies to it.
type faultOutcome struct {
	f     coll.Fault
	rank  int
	seen  int64 // steps of f.Kind the rank's team took
	fired bool
	why   string // when not fired
}

// rankFaults reads, for every --fault that applies to rank, whether it fired in team.
// stopped says the sweep ended early at a failed collective.
func rankFaults(o *options, team *coll.Team, rank int, stopped bool) []faultOutcome {
	var out []faultOutcome
	for _, f := range o.faults {
		if f.Rank != coll.AnyRank && f.Rank != rank {
			continue
		}
		seen := team.FaultSteps(f.Kind)
		fo := faultOutcome{f: f, rank: rank, seen: seen, fired: team.FaultFired(f)}
		if !fo.fired {
			fo.why = notFiredWhy(f, rank, seen, o.memOf(rank))
			if seen >= int64(max(f.N, 1)) {
				fo.why = fmt.Sprintf("rank %d reached %v step %d, but another failure of the same collective came first, so the injected one had no effect",
					rank, f.Kind, max(f.N, 1))
			}
			if stopped {
				fo.why += "; the run also ended early, at a failed collective"
			}
		}
		out = append(out, fo)
	}
	return out
}

// notFiredWhy says why f, which counts seen steps on rank, never reached its N.
func notFiredWhy(f coll.Fault, rank int, seen int64, m memPair) string {
	n := max(f.N, 1)
	took := fmt.Sprintf("rank %d took %d %s step(s), fewer than %d", rank, seen, f.Kind, n)
	switch f.Kind {
	case coll.FaultCopyIn:
		if seen == 0 {
			return fmt.Sprintf("nothing was copied in on rank %d: a source is copied in only when it is staged, and its src (%v memory) went to the transport in place%s",
				rank, m.src, stagedHint(m.src))
		}
	case coll.FaultCopyOut:
		if seen == 0 {
			return fmt.Sprintf("nothing was copied out on rank %d: a destination is copied out only when it is staged, and its dst (%v memory) went to the transport in place%s",
				rank, m.dst, stagedHint(m.dst))
		}
	case coll.FaultAlloc:
		if seen == 0 {
			return fmt.Sprintf("rank %d allocated no scratch: nothing of its (src %v, dst %v) was staged, and the transport needed none", rank, m.src, m.dst)
		}
		return took + " (scratch is allocated only for staged buffers and some algorithms, and kept for reuse between collectives)"
	case coll.FaultReg:
		return took + " (a buffer is registered once and its registration reused while it is cached)"
	case coll.FaultInit:
		return fmt.Sprintf("rank %d initialized %d collective(s), fewer than %d", rank, seen, n)
	case coll.FaultQPErr, coll.FaultStall:
		return fmt.Sprintf("rank %d posted %d collective(s), fewer than %d", rank, seen, n)
	}
	return took
}

func stagedHint(t mem.Type) string {
	if t == mem.Host {
		return " (use -m or --rank-mem with sim memory to stage it)"
	}
	return ""
}

// unfiredFaults lists, one line each, the --faults that fired on no rank of outcomes
// (every rank's, or only this process's under a launcher). A fault no rank could
// report on (its team never formed) is left out: nothing is known of it.
func unfiredFaults(o *options, outcomes [][]faultOutcome) []string {
	var lines []string
	for _, f := range o.faults {
		fired, reported := false, false
		var why []string
		for _, rank := range outcomes {
			for _, fo := range rank {
				if !sameFault(fo.f, f) {
					continue
				}
				reported = true
				fired = fired || fo.fired
				if !fo.fired && len(why) < 2 {
					why = append(why, fo.why)
				}
			}
		}
		if reported && !fired {
			lines = append(lines, fmt.Sprintf("--fault %v never fired, so the run did not test it: %s", f, strings.Join(why, "; ")))
		}
	}
	return lines
}

// firedFaults lists, one line each, the --faults that fired on some rank of outcomes,
// with the ranks: what the run did test.
func firedFaults(o *options, outcomes [][]faultOutcome) []string {
	var lines []string
	for _, f := range o.faults {
		var ranks []string
		for _, rank := range outcomes {
			for _, fo := range rank {
				if sameFault(fo.f, f) && fo.fired {
					ranks = append(ranks, fmt.Sprint(fo.rank))
				}
			}
		}
		switch {
		case len(ranks) == 1:
			lines = append(lines, fmt.Sprintf("--fault %v fired on rank %s", f, ranks[0]))
		case len(ranks) > 1:
			lines = append(lines, fmt.Sprintf("--fault %v fired on ranks %s", f, strings.Join(ranks, ",")))
		}
	}
	return lines
}

// reportUnfired prints the faults that fired and those that never did, and returns the
// exit status: 2 when some never fired (it takes precedence, since the run did not
// test what was asked), else code.
func reportUnfired(o *options, outcomes [][]faultOutcome, code int, say bool) int {
	if say {
		for _, l := range firedFaults(o, outcomes) {
			fmt.Fprintln(os.Stderr, "ibcoll-perf:", l)
		}
	}
	lines := unfiredFaults(o, outcomes)
	for _, l := range lines {
		if say {
			fmt.Fprintln(os.Stderr, "ibcoll-perf:", l)
		}
	}
	if len(lines) > 0 {
		return exitUsage
	}
	return code
}

// outcomeWire is a faultOutcome as ranks under a launcher exchange it.
type outcomeWire struct {
	Fault string `json:"f"`
	Rank  int    `json:"r"`
	Seen  int64  `json:"s"`
	Fired bool   `json:"d"`
	Why   string `json:"w,omitempty"`
}

func encodeOutcomes(fos []faultOutcome) ([]byte, error) {
	w := make([]outcomeWire, len(fos))
	for i, fo := range fos {
		w[i] = outcomeWire{Fault: fo.f.String(), Rank: fo.rank, Seen: fo.seen, Fired: fo.fired, Why: fo.why}
	}
	return json.Marshal(w)
}

func decodeOutcomes(b []byte) ([]faultOutcome, error) {
	var w []outcomeWire
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, err
	}
	fos := make([]faultOutcome, len(w))
	for i, x := range w {
		f, err := coll.ParseFault(x.Fault)
		if err != nil {
			return nil, err
		}
		fos[i] = faultOutcome{f: f, rank: x.Rank, seen: x.Seen, fired: x.Fired, why: x.Why}
	}
	return fos, nil
}

// sameFault compares faults as they fire: N 0 is N 1 (an outcome from another rank
// comes back from its String, which writes the 1).
func sameFault(a, b coll.Fault) bool {
	return a.Kind == b.Kind && a.Rank == b.Rank && max(a.N, 1) == max(b.N, 1)
}
