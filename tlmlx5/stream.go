package tlmlx5

import (
	"github.com/ibcoll/ibcoll/reduce"
)

// Reducing while a large receive lands: a send of at least two landing pieces reports
// each piece as it lands (a partial immediate), and a reduction that waits for that
// receive alone folds the pieces in place as they come. The reduction then overlaps
// the wire (on soft0, the peer's copy, on another core), and it reads each piece soon
// after it landed, while it is still in cache; at the receive's end only the last
// piece is left to fold.

// reduceRange folds bytes [lo, hi) of o's inputs into its output.
func (k *task) reduceRange(o *op, lo, hi int) error {
	if lo >= hi {
		return nil
	}
	for i, s := range o.ins {
		o.inb[i] = s.sub(lo, hi).bytes()
	}
	return reduce.IntoMany(o.out.sub(lo, hi).bytes(), o.inb, k.spec.DType, k.spec.Op)
}

// sub is bytes [lo, hi) of s.
func (s seg) sub(lo, hi int) seg { return seg{b: s.b, off: s.off + lo, n: hi - lo} }

// streamLanded folds what receive o has landed so far into each reduction that waits
// for o alone. Only host views qualify (the CPU reads every input and the output),
// only inputs as long as the output with o's target among them, and not while a
// staged source is still being copied in (its ranges are asked of Ready, per
// operation, when the operation starts).
func (k *task) streamLanded(o *op) {
	if k.ready != nil {
		return
	}
	for _, d := range o.next {
		r := &k.ops[d]
		if r.kind != opReduce || r.left != 1 || r.out.n != o.out.n || o.landed <= r.reduced || r.out.b.host == nil {
			continue
		}
		fed := false
		for _, s := range r.ins {
			if s.n != r.out.n || s.b.host == nil {
				fed = false
				break
			}
			fed = fed || s == o.out
		}
		if !fed {
			continue
		}
		// Whole elements only: a piece is a multiple of every element size, but
		// say so here rather than rely on it.
		hi := o.landed - o.landed%max(k.spec.DType.Size(), 1)
		if err := k.reduceRange(r, r.reduced, hi); err != nil {
			k.fail(err)
			return
		}
		k.streamed += hi - r.reduced
		r.reduced = hi
	}
}
