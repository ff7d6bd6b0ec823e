package tlmlx5

import (
	"fmt"
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

// named is c's row of algorithm alg ("knomial:4" names the knomial row), or nil.
func named(c collective.Type, alg string) *algorithm {
	name, _, _ := strings.Cut(alg, ":")
	for i := range algorithms {
		if a := &algorithms[i]; a.coll == c && a.name == name {
			return a
		}
	}
	return nil
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
	a, err := checkName(c, alg)
	if err != nil {
		return err
	}
	if a.fits != nil {
		if err := a.fits(n); err != nil {
			return fmt.Errorf("tlmlx5: %v %s %s: %w", c, a.name, err, driver.ErrInvalid)
		}
	}
	return a.tagsFit(n)
}

// checkName finds algorithm alg of c, checking its radix where it has one.
func checkName(c collective.Type, alg string) (*algorithm, error) {
	a := named(c, alg)
	if a == nil {
		return nil, fmt.Errorf("tlmlx5: algorithm %q is not one of %s's (%s): %w", alg, c, strings.Join(Algorithms(c), ", "), driver.ErrInvalid)
	}
	if _, r, hasR := strings.Cut(alg, ":"); hasR {
		if v, err := strconv.Atoi(r); err != nil || v < 2 || !a.radix {
			return nil, fmt.Errorf("tlmlx5: algorithm %q: only %s algorithms with a radix take \":R\", an integer >= 2: %w",
				alg, c, driver.ErrInvalid)
		}
	}
	return a, nil
}

// CheckAlg says whether alg names one of c's algorithms (driver.AlgChecker); whether
// it runs on a team of a given size is Fits's to say.
func (c *context) CheckAlg(t collective.Type, alg string) error {
	_, err := checkName(t, alg)
	return err
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
		b.alg = named(s.Type, s.Alg)
		if _, r, hasR := strings.Cut(s.Alg, ":"); hasR {
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
