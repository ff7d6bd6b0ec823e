package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestOpIgnoredByNonReductions: a collective that does not reduce ignores Args.Op, so
// ranks that fill it differently (a generic caller that sets it for every collective,
// beside one that leaves it zero) still agree, and the data is right (checked, fresh
// random data). A reduction's Op still takes part: ranks that differ fail with a
// mismatch naming both operators, never at the deadline.
func TestOpIgnoredByNonReductions(t *testing.T) {
	const n = 4
	rnd := testutil.Rand(t)
	w := newWorld(t, n, coll.Config{Timeout: mismatchTimeout})
	ops := []coll.Op{0, coll.OpSum, coll.OpMax, coll.OpBxor}
	ran := 0
	for _, typ := range coll.CollTypes() {
		if typ.IsReduction() {
			continue
		}
		t.Run(typ.String(), func(t *testing.T) {
			s := randScenario(rnd, n, typ, "", 13)
			s.dt = coll.Int32 // an integer type: every op in ops is valid for it
			s.opOf = func(r int) coll.Op { return ops[r%len(ops)] }
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, s.run(ctx, w, rnd), "%v", s)
			ran++
		})
	}
	require.Equal(t, len(coll.CollTypes())-3, ran, "the non-reductions")
	for _, typ := range []coll.CollType{coll.Reduce, coll.Allreduce, coll.ReduceScatter} {
		t.Run(typ.String()+"/mismatch", func(t *testing.T) {
			errs := w.run(func(r *rank) error {
				a := argsFor(typ, r.r, n, 8)
				a.Op = coll.OpSum
				if r.r == n-1 {
					a.Op = coll.OpMax
				}
				return r.team.Run(context.Background(), a)
			})
			requireMismatchOrRight(t, errs, func(int) {}, "int32/sum", "int32/max")
			w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
		})
	}
	t.Logf("%d non-reductions ran with mixed ops", ran)
}
