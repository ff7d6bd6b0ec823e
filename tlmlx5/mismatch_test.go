package tlmlx5

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// span is a byte range [lo, hi) of a buffer that a collective may write.
type span struct{ lo, hi int }

// mayWrite is, per rank, the spans of Src (0) and Dst (1) that may change.
type mayWrite [][2][]span

// checkOnly requires every byte of every rank's buffers outside the allowed spans
// (gaps and guards included) to be what it was before the post.
func checkOnly(t testing.TB, what string, runs []*rankRun, in [][2][]byte, ok mayWrite) {
	t.Helper()
	for r, rr := range runs {
		for i, got := range [2][]byte{rr.src.b, rr.dst.b} {
			want := bytes.Clone(in[r][i])
			for _, s := range ok[r][i] {
				copy(want[s.lo:s.hi], got[s.lo:s.hi])
			}
			testutil.Equal(t, want, got, fmt.Sprintf("%s: rank %d %s outside what it may write", what, r, []string{"Src", "Dst"}[i]))
		}
	}
}

// runMismatch creates the ranks' tasks (whose specs disagree), posts them and polls
// until at least one fails; then it polls on a while so that whatever else would
// happen happens, checks the buffers, and aborts and closes everything.
func runMismatch(t *testing.T, ft *fakeTeam, runs []*rankRun, ok mayWrite) []error {
	t.Helper()
	rnd := testutil.Rand(t)
	tasks := make([]driver.Task, len(runs))
	defer func() { ft.quiesce(t, tasks) }()
	for r, rr := range runs {
		k, err := ft.newTask(r, &rr.spec)
		require.NoError(t, err, "rank %d: NewTask is local and cannot see the mismatch", r)
		tasks[r] = k
	}
	in := fill(rnd, runs)
	for r, k := range tasks {
		require.NoError(t, k.Post(1), "rank %d", r)
	}
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return anyFailed(tasks) }),
		"no rank detects the mismatch: %s", waiting(tasks))
	// Ranks that wait for a failed peer wait for ever: a short while only.
	ft.pollUntil(t, 100*time.Millisecond, func() bool { return allSettled(tasks) })
	for i := 0; i < 500; i++ {
		ft.poll(t)
	}
	_, errs := states(tasks)
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
	}
	checkOnly(t, t.Name(), runs, in, ok)
	return errs
}

func elems(dt collective.DType, lo, n int) span { return span{lo * dt.Size(), (lo + n) * dt.Size()} }

// TestMismatchAlgorithm: rank 0 runs allgather ring while the others run recursive
// doubling for the same sequence number: the ready-to-receives' signatures and tags
// disagree, tasks fail, and rank 0 receives nothing.
func TestMismatchAlgorithm(t *testing.T) {
	const n, count = 4, 50
	dt := collective.Int32
	ft := newFakeTeam(t, n, nil)
	seq := ft.newSeq()
	runs := make([]*rankRun, n)
	ok := make(mayWrite, n)
	for r := range runs {
		alg := "rd"
		if r == 0 {
			alg = "ring"
		}
		runs[r] = newRankRun(t, seq, collective.Allgather, dt, 0, alg,
			collective.Args{Rank: r, Size: n, Src: collective.Buf{Count: count}, Dst: collective.Buf{Count: n * count}})
		ok[r][1] = []span{elems(dt, 0, n*count)}
	}
	ok[0][1] = []span{elems(dt, 0, count)} // its own block, copied locally
	errs := runMismatch(t, ft, runs, ok)
	require.Error(t, errs[0], "rank 0 is told of the others' algorithm")
}

// TestMismatchCollective: two ranks run different collectives for one sequence
// number (allreduce and allgather of the same count): both fail, and only the local
// copies happen.
func TestMismatchCollective(t *testing.T) {
	const n, count = 2, 64
	dt := collective.Uint32
	ft := newFakeTeam(t, n, nil)
	seq := ft.newSeq()
	runs := []*rankRun{
		newRankRun(t, seq, collective.Allreduce, dt, collective.OpSum, "rd",
			collective.Args{Rank: 0, Size: n, Src: collective.Buf{Count: count}, Dst: collective.Buf{Count: count}}),
		newRankRun(t, seq, collective.Allgather, dt, 0, "rd",
			collective.Args{Rank: 1, Size: n, Src: collective.Buf{Count: count / 2}, Dst: collective.Buf{Count: count}}),
	}
	ok := mayWrite{{{}, {elems(dt, 0, count)}}, {{}, {elems(dt, count/2, count/2)}}}
	errs := runMismatch(t, ft, runs, ok)
	require.Error(t, errs[0])
	require.Error(t, errs[1])
}

// TestMismatchGathervCount: rank 1 sends 9 elements where the root's layout has room
// for 5, right before rank 2's block: rank 1 fails instead of overwriting rank 2's
// block, the root's region for rank 1 and its gaps stay untouched, and rank 2's block
// still arrives.
func TestMismatchGathervCount(t *testing.T) {
	const n = 3
	dt := collective.Int16
	ft := newFakeTeam(t, n, nil)
	seq := ft.newSeq()
	counts, displs := []int{4, 5, 6}, []int{0, 10, 15} // a gap at [4, 10)
	own := []int{4, 9, 6}
	runs := make([]*rankRun, n)
	for r := range runs {
		a := collective.Args{Rank: r, Size: n, Root: 0, Src: collective.Buf{Count: own[r]}}
		if r == 0 {
			a.Dst = collective.Buf{Counts: counts, Displs: displs}
		}
		runs[r] = newRankRun(t, seq, collective.Gatherv, dt, 0, "linear", a)
	}
	ok := mayWrite{{{}, {elems(dt, 0, 4), elems(dt, 15, 6)}}, {}, {}}
	errs := runMismatch(t, ft, runs, ok)
	require.Error(t, errs[1], "rank 1 learns that the root expects 5 elements")
	require.ErrorContains(t, errs[1], "mismatch")
	// In the user's elements, with the bytes beside them.
	require.ErrorContains(t, errs[1], "rank 0 expects 5 int16 (10 bytes)")
	require.ErrorContains(t, errs[1], "rank 1 sends 9 int16 (18 bytes)")
	require.NoError(t, errs[2])
	// Rank 2's block is there.
	b := dt.Size()
	testutil.Equal(t, runs[2].src.b[:6*b], runs[0].dst.b[15*b:21*b], "rank 2's block at the root")
}

// TestMismatchBcastCount: two receivers of a bcast have fewer and more elements than
// the root: the root's sends to them fail, neither is written, the others get the
// data.
func TestMismatchBcastCount(t *testing.T) {
	const n = 4
	dt := collective.Uint64
	counts := []int{200, 200, 100, 300}
	for _, alg := range []string{"knomial", "chain"} {
		t.Run(alg, func(t *testing.T) {
			ft := newFakeTeam(t, n, nil)
			seq := ft.newSeq()
			runs := make([]*rankRun, n)
			ok := make(mayWrite, n)
			for r := range runs {
				runs[r] = newRankRun(t, seq, collective.Bcast, dt, 0, alg,
					collective.Args{Rank: r, Size: n, Src: collective.Buf{Count: counts[r]}})
			}
			ok[1][0] = []span{elems(dt, 0, 200)}
			if alg == "chain" { // 1 -> 2 -> 3: rank 1 still gets the data
				ok[2][0] = nil
			}
			errs := runMismatch(t, ft, runs, ok)
			if alg == "knomial" {
				require.Error(t, errs[0], "the root sends to ranks 2 and 3")
			} else {
				require.Error(t, errs[1], "rank 1 sends to rank 2")
			}
		})
	}
}

// TestMismatchAllreduceCount: one rank of an allreduce ring has a longer vector: its
// chunks differ from the others', tasks fail, and no byte past any rank's vector
// changes.
func TestMismatchAllreduceCount(t *testing.T) {
	const n = 3
	dt := collective.Int32
	counts := []int{100, 100, 103}
	ft := newFakeTeam(t, n, nil)
	seq := ft.newSeq()
	runs := make([]*rankRun, n)
	ok := make(mayWrite, n)
	for r := range runs {
		runs[r] = newRankRun(t, seq, collective.Allreduce, dt, collective.OpSum, "ring",
			collective.Args{Rank: r, Size: n, Src: collective.Buf{Count: counts[r]}, Dst: collective.Buf{Count: counts[r]}})
		ok[r][1] = []span{elems(dt, 0, counts[r])}
	}
	runMismatch(t, ft, runs, ok)
}

// TestMismatchEarlyRTR (issue 13, defect 2): a ready-to-receive for a tag this rank
// does not send, which arrives before this rank posted, is kept, not dropped: the
// post fails with ErrMismatch at once, naming both roots, without anything more
// from the peer. Both ranks believe they are the gather's root. The block is above
// the eager maximum, so the root asks for it by ready-to-receive (TestMismatchEarlyEager
// has the eager case).
func TestMismatchEarlyRTR(t *testing.T) {
	const n = 2
	count := eagerMaxFor(n)/4 + 2
	dt := collective.Int32
	ft := newFakeTeam(t, n, nil)
	seq := ft.newSeq()
	tasks := make([]driver.Task, n)
	defer func() { ft.quiesce(t, tasks) }()
	for r := range n {
		rr := newRankRun(t, seq, collective.Gather, dt, 0, "linear",
			collective.Args{Rank: r, Size: n, Root: r, Src: collective.Buf{Count: count}, Dst: collective.Buf{Count: n * count}})
		k, err := ft.newTask(r, &rr.spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	require.NoError(t, tasks[1].Post(1))
	// Rank 0 reads rank 1's ready-to-receive before it posts.
	for i := 0; i < 50; i++ {
		ft.poll(t)
	}
	_, err := tasks[0].State()
	require.NoError(t, err, "nothing is posted on rank 0 yet")
	require.NoError(t, tasks[0].Post(1))
	_, err = tasks[0].State()
	require.ErrorIs(t, err, driver.ErrMismatch, "the kept evidence fails the post at once")
	require.ErrorContains(t, err, "root mismatch")
	require.ErrorContains(t, err, "root 0")
	require.ErrorContains(t, err, "root 1")
}

// TestMismatchLateRTR (issue 13, defect 2): evidence that arrives after this rank's
// own part of the post ended is still read: the task, done, reports ErrMismatch.
func TestMismatchLateRTR(t *testing.T) {
	const n, count = 2, 8
	dt := collective.Int32
	ft := newFakeTeam(t, n, nil)
	seq := ft.newSeq()
	tasks := make([]driver.Task, n)
	runs := make([]*rankRun, n)
	for r := range n {
		runs[r] = newRankRun(t, seq, collective.Allreduce, dt, collective.OpSum, "rd",
			collective.Args{Rank: r, Size: n, Src: collective.Buf{Count: count}, Dst: collective.Buf{Count: count}})
		k, err := ft.newTask(r, &runs[r].spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	defer func() { ft.quiesce(t, tasks) }()
	ft.run(t, tasks, 1)
	done, err := tasks[0].State()
	require.True(t, done)
	require.NoError(t, err)
	// A peer running another algorithm asks for a tag rank 0 never sends.
	m := rtr{seq: seq, post: 1, tag: maxTag, n: 4, sig: 1, root: noRoot}
	ft.eps[0].(*team).onSlot(1, m.encode(make([]byte, slotSize)), ft.hs[0])
	_, err = tasks[0].State()
	require.ErrorIs(t, err, driver.ErrMismatch)
}

// TestMismatchEarlyEager: an eager message whose header disagrees with this rank's
// collective, which arrives before this rank posted, is kept as evidence: the post
// fails with ErrMismatch at once, naming both roots, and the sender is told (it fails
// too, from the ready-to-receive the receiver answers with). Each rank believes the
// other is the gather's root, so each sends its block eagerly to the other.
func TestMismatchEarlyEager(t *testing.T) {
	const n, count = 2, 8
	dt := collective.Int32
	ft := newFakeTeam(t, n, nil)
	seq := ft.newSeq()
	tasks := make([]driver.Task, n)
	defer func() { ft.quiesce(t, tasks) }()
	for r := range n {
		rr := newRankRun(t, seq, collective.Gather, dt, 0, "linear",
			collective.Args{Rank: r, Size: n, Root: 1 - r, Src: collective.Buf{Count: count}, Dst: collective.Buf{Count: n * count}})
		k, err := ft.newTask(r, &rr.spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	ft.warm(t) // the eager rings are known
	require.NoError(t, tasks[1].Post(1))
	// Rank 0 reads rank 1's eager header before it posts.
	for i := 0; i < 50; i++ {
		ft.poll(t)
	}
	_, err := tasks[0].State()
	require.NoError(t, err, "nothing is posted on rank 0 yet")
	require.Zero(t, earlyLen(ft.eps[0]), "the evidence is no data to keep")
	require.NoError(t, tasks[0].Post(1))
	_, err = tasks[0].State()
	require.ErrorIs(t, err, driver.ErrMismatch, "the kept evidence fails the post at once")
	require.ErrorContains(t, err, "root mismatch")
	require.ErrorContains(t, err, "root 0")
	require.ErrorContains(t, err, "root 1")
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { _, err := tasks[1].State(); return err != nil }),
		"the sender is never told")
	_, err = tasks[1].State()
	require.ErrorIs(t, err, driver.ErrMismatch)
}

// TestMismatchDTypeSizes: ranks whose datatypes differ (int32 at the root, float64 on
// rank 1) and so whose sizes differ: each message gives the peer's size in bytes,
// since its elements are of another type, and this rank's own in its elements.
func TestMismatchDTypeSizes(t *testing.T) {
	const n, count = 2, 4
	ft := newFakeTeam(t, n, nil)
	seq := ft.newSeq()
	runs := []*rankRun{
		newRankRun(t, seq, collective.Gather, collective.Int32, 0, "linear",
			collective.Args{Rank: 0, Size: n, Root: 0, Src: collective.Buf{Count: count}, Dst: collective.Buf{Count: n * count}}),
		newRankRun(t, seq, collective.Gather, collective.Float64, 0, "linear",
			collective.Args{Rank: 1, Size: n, Root: 0, Src: collective.Buf{Count: count}}),
	}
	ok := mayWrite{{{}, {span{0, 4 * count}}}, {{}, {}}}
	errs := runMismatch(t, ft, runs, ok)
	require.ErrorContains(t, errs[0], "rank 1 sends 32 bytes for tag 1, rank 0 expects 4 int32 (16 bytes)")
	require.ErrorContains(t, errs[1], "rank 0 expects 16 bytes for tag 1, rank 1 sends 4 float64 (32 bytes)")
}
