package tlmlx5

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestStreamedReduction: with landing pieces of 256 bytes, every reduction algorithm
// folds pieces of its large receives as they land (stream.go), and the results are
// still exact, over two posts of fresh data, in place and not. It also asserts that
// pieces were folded early, and that reduced pieces were sent on before their
// reduction ended (forwardReduced): a run in which nothing streamed tested nothing new.
func TestStreamedReduction(t *testing.T) {
	smallPieces(t, 256)
	rnd := testutil.Rand(t)
	totalForwarded := 0
	defer func() {
		if !t.Failed() {
			require.Positive(t, totalForwarded, "no send forwarded a reduced piece early (forwardReduced)")
		}
	}()
	for _, n := range []int{2, 3, 4, 5} {
		ft := newFakeTeam(t, n, nil)
		for _, c := range []collective.Type{collective.Reduce, collective.Allreduce, collective.ReduceScatter} {
			for _, alg := range algNames(c) {
				if alg != "" && Fits(c, alg, n) != nil {
					continue
				}
				for _, inPlace := range []bool{false, true} {
					t.Run(fmt.Sprintf("n%d/%v/%s/inplace=%v", n, c, alg, inPlace), func(t *testing.T) {
						// Above the eager maximum even in a ring's chunk of 1/n, so
						// that every block goes by ready-to-receive, in dozens of
						// pieces; an odd count, so that chunks do not split evenly.
						// No larger: the rxe VM suite runs this in 1 GiB, and a
						// 64× larger count ran it out of memory.
						cs := newCase(rnd, c, alg, n, n-1, n*(eagerMaxFor(n)+1001)+1, inPlace)
						runs := cs.build(t, ft.newSeq())
						tasks := make([]driver.Task, n)
						defer func() { ft.quiesce(t, tasks) }()
						for r, rr := range runs {
							k, err := ft.newTask(r, &rr.spec)
							require.NoError(t, err)
							tasks[r] = k
						}
						for post := uint32(1); post <= 2; post++ {
							in := fill(rnd, runs)
							want := cs.expect(t, runs, in)
							ft.run(t, tasks, post)
							check(t, fmt.Sprintf("%v post %d", cs, post), runs, want)
						}
						streamed, forwarded := 0, 0
						for _, k := range tasks {
							streamed += k.(*task).streamed
							forwarded += k.(*task).forwarded
						}
						require.Positive(t, streamed, "no reduction folded a piece before its receive ended")
						if c == collective.Allreduce && alg == "ring" && !inPlace && cs.op != collective.OpAvg {
							// Every rank's ready-to-receive of the second ring goes at its
							// post, so the reduced pieces of the first go on as they are made.
							// (Not for avg: the send waits for the division after the sum,
							// which runs once the sum is whole.)
							require.Positive(t, forwarded, "no reduced piece was sent before its reduction ended")
						}
						totalForwarded += forwarded
					})
				}
			}
		}
	}
}
