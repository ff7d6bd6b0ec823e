package tlmlx5

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/topo"
)

// algorithm is one way to run one collective: a row of the table below. Adding an
// algorithm is adding a row and its build function (in the collective's file).
type algorithm struct {
	coll collective.Type
	name string
	// radix: the name takes a radix, "knomial:4".
	radix bool
	// fits says why the algorithm cannot run on a team of n ranks (nil: it can).
	fits func(n int) error
	// tags is how many tags its graph uses on a team of n ranks (every tag is below
	// it): the immediate carries maxTags, so larger teams cannot run it.
	tags func(n int) int
	// foot is its mean footprint per rank (see Footprint).
	foot footprint
	// auto reports whether the size-based default picks it for this collective of
	// bytes bytes (see sizeOf): the first row of the collective that fits and picks
	// wins, so a collective's last row picks always.
	auto  func(n, bytes int) bool
	build func(b *builder) error
}

func always(int, int) bool { return true }

// maxTags is how many tags a task may use: the immediate's tag field, less the eager
// writes' tag.
const maxTags = eagerImmTag

// Tag counts. A tree or linear algorithm tags by virtual rank (builder.go's tree
// tags), gatherv and scatterv by rank, a ring or pairwise exchange by step: n. Two
// rings one after the other (allreduce ring, reduce srg, bcast sag) number the second
// after the first: 2n-2. Recursive doubling and halving use a handful per step.
func tagsPerRank(n int) int  { return n }
func tagsTwoRings(n int) int { return max(2*n-2, n) }
func tagsLog(int) int        { return 64 }

// tagsPerChunk: the chain tags its pipeline's chunks, whatever the team.
func tagsPerChunk(int) int { return maxChunks }

// footprint is an algorithm's mean cost per rank on a team of n for a collective of
// bytes (the size the default choice goes by): the peers a rank's sends and receives
// link it to, and the operations of its graph. Each is an upper bound of the mean
// over the ranks, within about 2× (TestFootprint checks both ways).
type footprint func(n, bytes int) (links, ops float64)

// A tree (k-nomial or linear) has n-1 edges, two ends each: a rank has 2 links and a
// few operations on average, however many its root has.
func footTree(int, int) (float64, float64) { return 2, 3 }

// footSteps is an algorithm of per-rank steps over k links: a ring (k = 2), the
// root-to-all phase plus ring of sag and srg (k = 4), pairwise exchange (k = n-1),
// with opsPerRank(n) operations.
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
		name, _, _ := strings.Cut(alg, ":")
		for i := range algorithms {
			if algorithms[i].coll == c && algorithms[i].name == name {
				a = &algorithms[i]
			}
		}
	}
	links, ops = a.foot(n, bytes)
	return links, ops, nil
}

// choose is the default choice for c on n ranks at bytes (see sizeOf): the first row
// that picks it and fits, or nil.
func choose(c collective.Type, n, bytes int) *algorithm {
	for i := range algorithms {
		a := &algorithms[i]
		if a.coll == c && a.auto != nil && a.auto(n, bytes) && (a.fits == nil || a.fits(n) == nil) && a.tagsFit(n) == nil {
			return a
		}
	}
	return nil
}

// tagsFit says why a team of n ranks is too large for the algorithm's tags.
func (a *algorithm) tagsFit(n int) error {
	if t := a.tags(n); t > maxTags {
		return fmt.Errorf("tlmlx5: %v %s on %d ranks needs %d tags, the immediate carries %d: %w", a.coll, a.name, n, t, maxTags, driver.ErrNotSupported)
	}
	return nil
}

func pow2(n int) error {
	if !topo.IsPow2(n) {
		return fmt.Errorf("needs a power-of-two team, not %d ranks", n)
	}
	return nil
}

// Fits reports whether algorithm alg (a name of Algorithms(c), with a radix ":R" where
// the algorithm takes one) can run collective c on a team of n ranks; the error says
// why not.
func Fits(c collective.Type, alg string, n int) error {
	name, r, hasR := strings.Cut(alg, ":")
	for i := range algorithms {
		a := &algorithms[i]
		if a.coll != c || a.name != name {
			continue
		}
		if hasR {
			if v, err := strconv.Atoi(r); err != nil || v < 2 || !a.radix {
				return fmt.Errorf("tlmlx5: algorithm %q: only %s algorithms with a radix take \":R\", an integer >= 2: %w",
					alg, c, driver.ErrInvalid)
			}
		}
		if a.fits != nil {
			if err := a.fits(n); err != nil {
				return fmt.Errorf("tlmlx5: %v %s %s: %w", c, name, err, driver.ErrInvalid)
			}
		}
		return a.tagsFit(n)
	}
	return fmt.Errorf("tlmlx5: algorithm %q is not one of %s's (%s): %w", alg, c, strings.Join(Algorithms(c), ", "), driver.ErrInvalid)
}

// algorithms is the table of every algorithm, in order of preference per collective.
var algorithms = []algorithm{
	{coll: collective.Barrier, name: "agree", auto: always, tags: tagsLog, foot: footNone, build: func(*builder) error { return nil }},

	{coll: collective.Bcast, name: "knomial", radix: true, auto: func(n, bytes int) bool { return bytes < largeBcast || n <= 2 || n > linearMax },
		tags: tagsPerRank, foot: footTree, build: (*builder).bcastKnomial},
	{coll: collective.Bcast, name: "sag", auto: always, tags: tagsTwoRings, foot: footSteps(constLinks(4), perRankOps(2)), build: (*builder).bcastScatterAllgather},
	{coll: collective.Bcast, name: "chain", tags: tagsPerChunk, foot: footChain, build: (*builder).bcastChain},

	{coll: collective.Gather, name: "knomial", radix: true, auto: func(n, bytes int) bool { return n > 16 && bytes < largeGatherNB || n > linearMax },
		tags: tagsPerRank, foot: footTree, build: (*builder).gather},
	{coll: collective.Gather, name: "linear", auto: always, tags: tagsPerRank, foot: footTree, build: (*builder).gatherLinear},

	{coll: collective.Scatter, name: "knomial", radix: true, auto: func(n, bytes int) bool { return n > 16 && bytes < largeGatherNB || n > linearMax },
		tags: tagsPerRank, foot: footTree, build: (*builder).scatter},
	{coll: collective.Scatter, name: "linear", auto: always, tags: tagsPerRank, foot: footTree, build: (*builder).scatterLinear},

	{coll: collective.Gatherv, name: "linear", auto: always, tags: tagsPerRank, foot: footTree, build: (*builder).gatherv},
	{coll: collective.Scatterv, name: "linear", auto: always, tags: tagsPerRank, foot: footTree, build: (*builder).scatterv},

	{coll: collective.Reduce, name: "knomial", radix: true, auto: func(n, bytes int) bool { return bytes < largeReduce || n <= 2 || n > linearMax },
		tags: tagsPerRank, foot: footTree, build: (*builder).reduceKnomial},
	{coll: collective.Reduce, name: "srg", auto: always, tags: tagsTwoRings, foot: footSteps(constLinks(4), perRankOps(3)), build: (*builder).reduceScatterGather},

	{coll: collective.Allgather, name: "rd", fits: pow2, auto: func(_, bytes int) bool { return bytes < largeGatherNB },
		tags: tagsLog, foot: footLog, build: (*builder).allgatherRD},
	{coll: collective.Allgather, name: "ring", auto: always, tags: tagsPerRank, foot: footSteps(constLinks(2), perRankOps(2)), build: (*builder).allgatherRing},

	{coll: collective.Allreduce, name: "ring", auto: func(_, bytes int) bool { return bytes >= largeAllred },
		tags: tagsTwoRings, foot: footSteps(constLinks(2), perRankOps(5)), build: (*builder).allreduceRing},
	{coll: collective.Allreduce, name: "rd", auto: always, tags: tagsLog, foot: footLog, build: (*builder).allreduceRD},

	{coll: collective.Alltoall, name: "pairwise", auto: always, tags: tagsPerRank, foot: footSteps(perRankLinks, perRankOps(3)), build: (*builder).alltoall},

	{coll: collective.ReduceScatter, name: "rh", fits: pow2, tags: tagsLog, foot: footLog, build: (*builder).reduceScatterRH},
	{coll: collective.ReduceScatter, name: "ring", auto: always, tags: tagsPerRank, foot: footSteps(constLinks(2), perRankOps(3)), build: (*builder).reduceScatterRing},

	{coll: collective.Allgatherv, name: "ring", auto: always, tags: tagsPerRank, foot: footSteps(constLinks(2), perRankOps(2)), build: (*builder).allgatherv},
	{coll: collective.Alltoallv, name: "pairwise", auto: always, tags: tagsPerRank, foot: footSteps(perRankLinks, perRankOps(3)), build: (*builder).alltoallv},
}

// Algorithms lists the algorithm names of a collective, in order of preference.
func Algorithms(c collective.Type) []string {
	var out []string
	for i := range algorithms {
		if algorithms[i].coll == c {
			out = append(out, algorithms[i].name)
		}
	}
	return out
}

// sizeOf is the size the default choice goes by: a rank's block for gather and
// scatter, else the larger of the two buffers.
func (b *builder) sizeOf() int {
	s := b.spec
	switch s.Type {
	case collective.Gather, collective.Scatter:
		return s.Block * b.dt
	}
	return max(s.Src.Bytes, s.Dst.Bytes)
}

// pick resolves the algorithm from its name ("knomial:4") or, when empty, from the
// message size and the team size, which every rank knows alike.
func (b *builder) pick() error {
	s := b.spec
	b.radix = defaultRadix
	if s.Alg == "" {
		if b.alg = choose(s.Type, b.n, b.sizeOf()); b.alg == nil {
			return fmt.Errorf("tlmlx5: no algorithm for %v fits a team of %d ranks: %w", s.Type, b.n, driver.ErrNotSupported)
		}
	} else {
		if err := Fits(s.Type, s.Alg, b.n); err != nil {
			return err
		}
		name, r, hasR := strings.Cut(s.Alg, ":")
		for i := range algorithms {
			if a := &algorithms[i]; a.coll == s.Type && a.name == name {
				b.alg = a
			}
		}
		if hasR {
			b.radix, _ = strconv.Atoi(r) // Fits checked it
		}
	}
	b.k.alg = b.alg.name
	if b.alg.radix {
		b.k.alg = fmt.Sprintf("%s:%d", b.alg.name, b.radix)
	}
	return nil
}

func (b *builder) build() error {
	if err := b.pick(); err != nil {
		return err
	}
	return b.alg.build(b)
}
