package tlmlx5

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// witness records the peers a task reported (driver.Witness).
type witness struct {
	mu    sync.Mutex
	peers []int
}

func (w *witness) Seen(p int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.peers, p) {
		w.peers = append(w.peers, p)
	}
}

// TestWitnessAndTells: Tells names exactly the peers that a first post sends an eager
// header (a rendezvous receive's ready-to-receive carries the signature too, and is
// witnessed, but does not count: see witness.go), and after one
// post every rank's Witness heard at least the peers whose Tells named it. Then a peer
// with another coll signature (spec.Sig) is never witnessed: the post fails as a
// mismatch instead.
func TestWitnessAndTells(t *testing.T) {
	rnd := testutil.Rand(t)
	const n = 3
	for _, c := range []struct {
		cs   *collCase
		tell [n][]int // tell[r]: the peers rank r's task tells
	}{
		{plainCase(collective.Gather, "linear", n, 0, 64, collective.Uint8, 0), [n][]int{nil, {0}, {0}}},
		{plainCase(collective.Gather, "linear", n, 0, eagerMaxFor(n)+64, collective.Uint8, 0), [n][]int{nil, nil, nil}},
		{plainCase(collective.Scatter, "linear", n, 2, 64, collective.Uint8, 0), [n][]int{nil, nil, {0, 1}}},
		{plainCase(collective.Scatter, "linear", n, 2, eagerMaxFor(n)+64, collective.Uint8, 0), [n][]int{nil, nil, nil}},
	} {
		t.Run(c.cs.String(), func(t *testing.T) {
			ft := newFakeTeam(t, n, nil)
			for _, mismatch := range []bool{false, true} {
				runs := c.cs.build(t, ft.newSeq())
				tasks := make([]driver.Task, n)
				ws := make([]*witness, n)
				for r := range tasks {
					ws[r] = &witness{}
					runs[r].spec.Witness = ws[r]
					runs[r].spec.Sig = 7
					if mismatch && r == 1 {
						runs[r].spec.Sig = 8
					}
					k, err := ft.newTask(r, &runs[r].spec)
					require.NoError(t, err)
					tasks[r] = k
				}
				for r, k := range tasks {
					for p := 0; p < n; p++ {
						require.Equal(t, slices.Contains(c.tell[r], p), k.Tells(p), "rank %d Tells(%d)", r, p)
					}
				}
				want := c.cs.expect(t, runs, fill(rnd, runs))
				var errs []error
				if !mismatch {
					errs = ft.post(t, tasks, 1)
				} else {
					// The transport fails the side that sees the difference; coll's
					// abort would fail the others.
					for r, k := range tasks {
						require.NoError(t, k.Post(1), "rank %d", r)
					}
					if !ft.pollUntil(t, pollTimeout, func() bool { return anyFailed(tasks) }) {
						t.Fatalf("rank 1's other signature went unnoticed: %s", waiting(tasks))
					}
					_, errs = states(tasks)
				}
				for r := range tasks {
					var heard []int
					for p := 0; p < n; p++ {
						if slices.Contains(c.tell[p], r) && !(mismatch && (p == 1 || r == 1)) {
							heard = append(heard, p)
						}
					}
					got := slices.Sorted(slices.Values(ws[r].peers))
					for _, p := range heard {
						require.Contains(t, got, p, "mismatch %v: rank %d did not witness rank %d, which Tells it", mismatch, r, p)
					}
					if mismatch {
						// Other messages may carry the signature too (a ready-to-receive
						// answering a sender that did not know the ring yet), never
						// another one's.
						require.NotContains(t, got, 1, "rank %d witnessed rank 1's other signature", r)
						if r == 1 {
							require.Empty(t, got, "rank 1 witnessed a signature not its own")
						}
					}
				}
				if !mismatch {
					for r, err := range errs {
						require.NoError(t, err, "rank %d", r)
					}
					check(t, "post 1", runs, want)
				} else {
					failed := 0
					for _, err := range errs {
						if err != nil {
							require.ErrorIs(t, err, driver.ErrMismatch)
							failed++
						}
					}
					require.Positive(t, failed)
				}
				ft.quiesce(t, tasks)
			}
		})
	}
}
