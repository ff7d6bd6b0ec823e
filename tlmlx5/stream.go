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
// staged source is still being copied in (its ranges are asked of Ready when an
// operation starts, and for a send at each of its work requests: srcwait.go).
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
		k.forwardReduced(r)
	}
}

// forwardReduced posts, for each send that waits for reduction r alone and sends r's
// output, the work requests whose bytes r has folded already: a reduced piece goes on
// while it is still in this core's cache (on soft0 the poster copies it), and the
// send overlaps the rest of the reduction instead of following it. The send's last
// work request always waits for r's end (issue), so its completion still means the
// whole send is done. Only a send whose ready-to-receive for this post is here, and
// whose data is r's output and nothing else, qualifies.
func (k *task) forwardReduced(r *op) {
	for _, d := range r.next {
		o := &k.ops[d]
		if o.kind != opSend || o.left != 1 || o.eager || len(o.wrs) < 2 || o.haveRTR != k.post ||
			len(o.segs) != 1 || o.segs[0] != r.out || o.rtr.n != o.n || o.rtr.sig != k.sig {
			continue
		}
		j := o.early
		for j < len(o.wrs)-1 && int(o.offs[j+1]) <= r.reduced {
			j++
		}
		if j == o.early {
			continue
		}
		if o.early == 0 {
			o.wrsLeft = len(o.wrs)
		}
		k.queueWRs(o, o.early, j)
		k.forwarded += int(o.offs[j] - o.offs[o.early])
		o.early = j
	}
}
