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
	// auto reports whether the size-based default picks it for this collective of
	// bytes bytes (see sizeOf): the first row of the collective that fits and picks
	// wins, so a collective's last row picks always.
	auto  func(n, bytes int) bool
	build func(b *builder) error
}

func always(int, int) bool { return true }

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
		return nil
	}
	return fmt.Errorf("tlmlx5: algorithm %q is not one of %s's (%s): %w", alg, c, strings.Join(Algorithms(c), ", "), driver.ErrInvalid)
}

// algorithms is the table of every algorithm, in order of preference per collective.
var algorithms = []algorithm{
	{coll: collective.Barrier, name: "agree", auto: always, build: func(*builder) error { return nil }},

	{coll: collective.Bcast, name: "knomial", radix: true, auto: func(n, bytes int) bool { return bytes < largeBcast || n <= 2 || n > linearMax },
		build: (*builder).bcastKnomial},
	{coll: collective.Bcast, name: "sag", auto: always, build: (*builder).bcastScatterAllgather},
	{coll: collective.Bcast, name: "chain", build: (*builder).bcastChain},

	{coll: collective.Gather, name: "knomial", radix: true, auto: func(n, bytes int) bool { return n > 16 && bytes < largeGatherNB || n > linearMax },
		build: (*builder).gather},
	{coll: collective.Gather, name: "linear", auto: always, build: (*builder).gatherLinear},

	{coll: collective.Scatter, name: "knomial", radix: true, auto: func(n, bytes int) bool { return n > 16 && bytes < largeGatherNB || n > linearMax },
		build: (*builder).scatter},
	{coll: collective.Scatter, name: "linear", auto: always, build: (*builder).scatterLinear},

	{coll: collective.Gatherv, name: "linear", auto: always, build: (*builder).gatherv},
	{coll: collective.Scatterv, name: "linear", auto: always, build: (*builder).scatterv},

	{coll: collective.Reduce, name: "knomial", radix: true, auto: func(n, bytes int) bool { return bytes < largeReduce || n <= 2 || n > linearMax },
		build: (*builder).reduceKnomial},
	{coll: collective.Reduce, name: "srg", auto: always, build: (*builder).reduceScatterGather},

	{coll: collective.Allgather, name: "rd", fits: pow2, auto: func(_, bytes int) bool { return bytes < largeGatherNB },
		build: (*builder).allgatherRD},
	{coll: collective.Allgather, name: "ring", auto: always, build: (*builder).allgatherRing},

	{coll: collective.Allreduce, name: "ring", auto: func(_, bytes int) bool { return bytes >= largeAllred },
		build: (*builder).allreduceRing},
	{coll: collective.Allreduce, name: "rd", auto: always, build: (*builder).allreduceRD},

	{coll: collective.Alltoall, name: "pairwise", auto: always, build: (*builder).alltoall},

	{coll: collective.ReduceScatter, name: "rh", fits: pow2, build: (*builder).reduceScatterRH},
	{coll: collective.ReduceScatter, name: "ring", auto: always, build: (*builder).reduceScatterRing},

	{coll: collective.Allgatherv, name: "ring", auto: always, build: (*builder).allgatherv},
	{coll: collective.Alltoallv, name: "pairwise", auto: always, build: (*builder).alltoallv},
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
		bytes := b.sizeOf()
		for i := range algorithms {
			a := &algorithms[i]
			if a.coll == s.Type && a.auto != nil && a.auto(b.n, bytes) && (a.fits == nil || a.fits(b.n) == nil) {
				b.alg = a
				break
			}
		}
		if b.alg == nil {
			return fmt.Errorf("tlmlx5: no algorithm for %v: %w", s.Type, driver.ErrNotSupported)
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
