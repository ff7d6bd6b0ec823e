package coll_test

import (
	"context"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
)

// A source copied in beside the wire ends with no completion: the waiter polls while
// the copy-in runs and once after, and the transport retries the operations that wait
// for the source at that poll. On a team of one rank the transport has no CQ, and its
// Poll returned before the retry: every collective whose own block is copied locally
// (allgather, gather, ...) timed out "waiting for the staged copy-in of its source"
// (found by the soak). Each collective here has a sim source past the pipelining
// threshold and must succeed.
func TestRegressionCopyInLastPoll(t *testing.T) {
	rnd := testutil.Rand(t)
	w := newWorld(t, 1, coll.Config{Timeout: 30 * time.Second})
	for _, typ := range coll.CollTypes() {
		for _, alg := range append(tlmlx5.Algorithms(typ), "") {
			if tlmlx5.Fits(typ, alg, 1) != nil {
				continue
			}
			s := randScenario(rnd, 1, typ, alg, 3<<20)
			s.dt, s.op, s.inPlace, s.reps = coll.Uint8, 0, false, 2
			if typ.IsReduction() {
				s.dt, s.op = coll.Uint32, coll.OpSum
			}
			s.srcType[0], s.dstType[0], s.how[0] = mem.Sim, mem.Host, 1
			if err := s.run(context.Background(), w, rnd); err != nil {
				t.Errorf("%v", err)
			}
		}
	}
}
