package tlmlx5

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestMismatchEagerGathervCount: a gatherv leaf sends more, or fewer, elements than
// the root's layout has for it, as an eager message into a credit's slot (the rings
// are known, so no ready-to-receive is involved: TestMismatchGathervCount has that
// path). A v-collective's counts are not in the signature, so the header's size is
// the only evidence: the root fails its post with ErrMismatch without copying the
// slot into its buffer (a copy of the root's own size would take bytes the leaf
// never sent, or cut the leaf's block short), and the leaf is told.
func TestMismatchEagerGathervCount(t *testing.T) {
	const n = 3
	dt := collective.Int16
	counts, displs := []int{4, 5, 6}, []int{0, 10, 15} // a gap at [4, 10)
	for _, c := range []struct {
		name string
		own1 int // rank 1's count; the root's layout says 5
	}{{"more", 9}, {"fewer", 3}} {
		t.Run(c.name, func(t *testing.T) {
			rnd := testutil.Rand(t)
			ft := newFakeTeam(t, n, nil)
			ft.warm(t) // every rank knows every ring: small messages take a slot
			seq := ft.newSeq()
			own := []int{4, c.own1, 6}
			runs := make([]*rankRun, n)
			for r := range runs {
				a := collective.Args{Rank: r, Size: n, Root: 0, Src: collective.Buf{Count: own[r]}}
				if r == 0 {
					a.Dst = collective.Buf{Counts: counts, Displs: displs}
				}
				runs[r] = newRankRun(t, seq, collective.Gatherv, dt, 0, "linear", a)
			}
			tasks := ft.newTasks(t, runs)
			defer func() { ft.quiesce(t, tasks) }()
			in := fill(rnd, runs)
			for r, k := range tasks {
				require.NoError(t, k.Post(1), "rank %d", r)
			}
			require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
				_, e0 := tasks[0].State()
				_, e1 := tasks[1].State()
				return e0 != nil && e1 != nil
			}), "the root and the leaf must both fail: %s", waiting(tasks))
			ft.pollUntil(t, 100*time.Millisecond, func() bool { return allSettled(tasks) })
			for _, o := range tasks[1].(*task).ops {
				require.False(t, o.kind == opSend && o.rts, "rank 1's block went by ready-to-receive, not into a slot")
			}
			_, errs := states(tasks)
			require.ErrorIs(t, errs[0], driver.ErrMismatch, "the root reads the header's size")
			require.ErrorIs(t, errs[1], driver.ErrMismatch, "the leaf is told by the root's answer")
			// The root's region for rank 1 keeps its bytes; its own block and rank 2's
			// may be written.
			checkOnly(t, c.name, runs, in, mayWrite{{{}, {elems(dt, 0, 4), elems(dt, 15, 6)}}, {}, {}})
		})
	}
}
