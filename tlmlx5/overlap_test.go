package tlmlx5

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestMessagesBeforeLocalCopy: a gather root posts its ready-to-receives before it
// copies its own block, so that its children write while it copies (task.run). On
// the first post of a fresh task nothing has been sent yet, so every root with a
// block of at least deferLocal bytes must have started a copy after posting; the
// results are checked over three posts of fresh data.
func TestMessagesBeforeLocalCopy(t *testing.T) {
	rnd := testutil.Rand(t)
	for _, n := range []int{2, 3, 5} {
		ft := newFakeTeam(t, n, nil)
		for _, alg := range []string{"linear", "knomial"} {
			root := rnd.IntN(n)
			t.Run(fmt.Sprintf("n%d/%s/root%d", n, alg, root), func(t *testing.T) {
				cs := newCase(rnd, collective.Gather, alg, n, root, 0, false)
				cs.count = (deferLocal+rnd.IntN(4096))/cs.dt.Size() + 1
				runCaseThen(t, ft, rnd, cs, func(tasks []driver.Task) {
					require.Positive(t, tasks[root].(*task).overlapped,
						"the root copied its own block before posting its ready-to-receives")
				})
			})
		}
	}
}
