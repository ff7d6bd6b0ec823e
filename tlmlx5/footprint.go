package tlmlx5

import (
	"fmt"
	"math/bits"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
)

// footprint is an algorithm's mean cost per rank on a team of n for a collective of
// bytes (the size the default choice goes by): the peers a rank's sends and receives
// link it to, and the operations of its graph. Each is an upper bound of the mean
// over the ranks, within about 2× (TestFootprint checks both ways).
type footprint func(n, bytes int) (links, ops float64)

// A tree (k-nomial or linear) has n-1 edges, two ends each: a rank has 2 links and a
// few operations on average, however many its root has.
func footTree(int, int) (float64, float64) { return 2, 3 }

// footSteps is an algorithm of steps over a few links: a ring (2), sag and srg, whose
// root also talks to every rank (4 on average), pairwise exchange (n-1); ops(n)
// operations.
func footSteps(links func(n int) float64, ops func(n int) float64) footprint {
	return func(n, _ int) (float64, float64) { return min(links(n), float64(n-1)), ops(n) }
}

func constLinks(k float64) func(int) float64 { return func(int) float64 { return k } }
func perRankOps(k float64) func(int) float64 { return func(n int) float64 { return k * float64(n) } }
func perRankLinks(n int) float64             { return float64(n - 1) }

// footNone: the barrier is the completion agreement alone.
func footNone(int, int) (float64, float64) { return 0, 0 }

// footLog is recursive doubling or halving: about log2(n) partners (plus the fold
// partner of a team that is no power of two) and three operations per step.
func footLog(n, _ int) (float64, float64) {
	lg := float64(bits.Len(uint(max(n-1, 0))))
	return lg + 1, 3*lg + 4
}

// footChain is the chain's pipeline: 2 links, a send and a receive per chunk, but
// at its two ends.
func footChain(n, bytes int) (float64, float64) {
	f := float64(n-1) / float64(n)
	return 2 * f, 2 * f * float64(chainChunks(bytes))
}

// Footprint is what one rank of a team of n holds on average for collective c run with
// algorithm alg (a name of Algorithms(c), with or without a radix; "" for the default
// choice at bytes: a rank's block for gather and scatter, else the larger buffer):
// the peers it links to (a queue pair each, made on first use) and the operations of
// its task's graph, both upper bounds within about 2×. It leaves out the completion
// agreement's links (coll's k-nomial tree: 2 on average). ibcoll-perf sizes its
// memory check with it.
func Footprint(c collective.Type, alg string, n, bytes int) (links, ops float64, err error) {
	if n < 1 || bytes < 0 {
		return 0, 0, fmt.Errorf("tlmlx5: Footprint: n must be >= 1 and bytes >= 0, got %d and %d: %w", n, bytes, driver.ErrInvalid)
	}
	var a *algorithm
	if alg == "" {
		if a = choose(c, n, bytes); a == nil {
			return 0, 0, fmt.Errorf("tlmlx5: no algorithm for %v fits a team of %d ranks: %w", c, n, driver.ErrNotSupported)
		}
	} else {
		if err := Fits(c, alg, n); err != nil {
			return 0, 0, err
		}
		a = named(c, alg)
	}
	links, ops = a.foot(n, bytes)
	return links, ops, nil
}
