package tlmlx5

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// stageOutputs makes every rank's output of runs a staged one, as coll's staging makes
// it: TaskSpec.Landed is set, and copies each range it is told of from the buffer that
// holds the post's output (driver.OutputOwner, else the spec's own) into the rank's
// output, which then plays the user's buffer. tasks is read when Landed is called,
// so the caller fills it after; spans, if not nil, collects each rank's reports.
func stageOutputs(c collective.Type, runs []*rankRun, tasks []driver.Task, spans *[][][2]int) {
	if spans != nil {
		*spans = make([][][2]int, len(runs))
	}
	for r, rr := range runs {
		out := rr.dst.b[:rr.dst.bytes]
		if c == collective.Bcast {
			out = rr.src.b[:rr.src.bytes]
		}
		rr.spec.Landed = func(off, n int) {
			k := tasks[r].(*task)
			from := out
			if b := k.Output(k.post); b != nil {
				from = b.Bytes()
			}
			copy(out[off:off+n], from[off:off+n])
			if spans != nil {
				(*spans)[r] = append((*spans)[r], [2]int{off, n})
			}
		}
	}
}

// TestOutputAhead: a persistent collective whose output is staged (Landed is set)
// holds it in two buffers of the transport's own, one per post parity, and its
// receives send their ready-to-receives a post ahead, landing pieces included: six
// posts of fresh data, every byte checked through what Landed reported (copied out as
// coll does); every post after the first found its RTR sent ahead; the two buffers
// are distinct and neither is the spec's output. Some rank of every case must double
// its output, or the case tests nothing. An in-place root, and a request that is
// not persistent, keep the spec's output.
func TestOutputAhead(t *testing.T) {
	smallPieces(t, 512)
	rnd := testutil.Rand(t)
	const n, posts = 4, 6
	count := eagerMaxFor(n) + 4*landPiece + rnd.IntN(4000) // bytes per block: rendezvous, in pieces
	for _, c := range []struct {
		c     collective.Type
		alg   string
		mixed bool // some blocks eager or empty (mixBlocks)
	}{
		{collective.Gather, "linear", false}, {collective.Gather, "knomial", false}, {collective.Scatter, "linear", false},
		{collective.Alltoall, "pairwise", false}, {collective.Bcast, "knomial:4", false}, {collective.Gatherv, "linear", false},
		{collective.Scatterv, "linear", false}, {collective.Alltoallv, "pairwise", false},
		{collective.Gatherv, "linear", true}, {collective.Alltoallv, "pairwise", true},
	} {
		require.NoError(t, Fits(c.c, c.alg, n), "%v %s", c.c, c.alg)
		name := fmt.Sprintf("%v/%s", c.c, c.alg)
		if c.mixed {
			name += "/mixed"
		}
		t.Run(name, func(t *testing.T) {
			ft := newFakeTeam(t, n, nil)
			cs := newCase(rnd, c.c, c.alg, n, 1, count, false)
			cs.dt = collective.Uint8
			bigBlocks(rnd, cs, count) // a v-layout's every block goes by ready-to-receive
			if c.mixed {
				mixBlocks(rnd, cs)
			}
			runs := cs.build(t, ft.newSeq())
			tasks := make([]driver.Task, n)
			stageOutputs(c.c, runs, tasks, nil)
			for r, rr := range runs {
				k, err := ft.newTask(r, &rr.spec)
				require.NoError(t, err)
				tasks[r] = k
			}
			defer func() { ft.quiesce(t, tasks) }()
			for post := uint32(1); post <= posts; post++ {
				want := cs.expect(t, runs, fill(rnd, runs))
				ft.run(t, tasks, post)
				check(t, fmt.Sprintf("post %d", post), runs, want)
			}
			doubled, withInPost := 0, 0
			for r, dk := range tasks {
				k := dk.(*task)
				if !k.outDoubled {
					require.Nil(t, k.Output(1), "rank %d", r)
					continue
				}
				doubled++
				for i := range k.ops {
					if o := &k.ops[i]; o.kind == opRecv && o.out.b == k.out && !o.armsAhead {
						require.True(t, o.eager || o.n == 0, "rank %d: a receive into its two buffers neither arms ahead nor is eager or empty", r)
						withInPost++
					}
				}
				a, b := k.Output(posts), k.Output(posts+1)
				require.NotNil(t, a)
				require.NotNil(t, b)
				require.NotEqual(t, a.Addr(), b.Addr(), "rank %d: one buffer for two posts", r)
				require.Equal(t, a, k.Output(posts+2), "rank %d: a post's buffer is its parity's", r)
				spec := k.spec.Dst
				if c.c == collective.Bcast {
					spec = k.spec.Src
				}
				require.NotContains(t, []uintptr{a.Addr(), b.Addr()}, spec.Addr, "rank %d: the spec's output is one of the two", r)
				ahead := aheadOps(k)
				require.Positive(t, ahead, "rank %d doubled its output but no receive arms ahead", r)
				require.Equal(t, ahead*(posts-1), k.tookAhead, "rank %d: posts that found their RTR sent ahead", r)
				require.Equal(t, ahead*posts, k.armedAhead, "rank %d: RTRs sent ahead", r)
			}
			require.Positive(t, doubled, "no rank held its output in buffers of its own: the case tests nothing")
			if c.mixed {
				require.Positive(t, withInPost, "no rank that doubled its output has an eager or empty receive into it: the case tests nothing")
			}
		})
	}
	t.Run("not", func(t *testing.T) {
		ft := newFakeTeam(t, 2, nil)
		for _, inPlace := range []bool{false, true} {
			for _, persistent := range []bool{false, true} {
				if !inPlace && persistent {
					continue
				}
				cs := newCase(rnd, collective.Gather, "linear", 2, 0, count, inPlace)
				runs := cs.build(t, ft.newSeq())
				tasks := make([]driver.Task, 2)
				stageOutputs(collective.Gather, runs, tasks, nil)
				runs[0].spec.Persistent = persistent
				k, err := ft.newTask(0, &runs[0].spec)
				require.NoError(t, err)
				tasks[0] = k
				require.False(t, k.(*task).outDoubled, "in place %v, persistent %v", inPlace, persistent)
				require.Zero(t, aheadOps(k.(*task)))
				require.NoError(t, k.Close())
			}
		}
	})
}

// bigBlocks redraws a v-layout's counts of cs between count and count+999 elements,
// and their displacements: every block then goes by ready-to-receive (an eager or
// empty receive into an output keeps it single).
func bigBlocks(rnd *rand.Rand, cs *collCase, count int) {
	for r := range cs.counts {
		cs.counts[r] = count + rnd.IntN(1000)
	}
	for p := range cs.m {
		for r := range cs.m[p] {
			cs.m[p][r] = count + rnd.IntN(1000)
		}
	}
	for r := 0; r < cs.n; r++ {
		switch {
		case cs.counts != nil:
			cs.srcDispls[r], cs.dstDispls[r] = randDispls(rnd, cs.counts), randDispls(rnd, cs.counts)
		case cs.m != nil:
			cs.srcDispls[r], cs.dstDispls[r] = randDispls(rnd, cs.m[r]), randDispls(rnd, cs.column(r))
		}
	}
}

// mixBlocks makes some blocks of cs's v-layout (drawn by bigBlocks) eager or empty: of
// what each rank receives, one block from another rank is empty and one small enough
// to go eagerly, the rest stay rendezvous.
func mixBlocks(rnd *rand.Rand, cs *collCase) {
	small := 1 + rnd.IntN(eagerMaxFor(cs.n)/2)
	switch {
	case cs.counts != nil: // gatherv: the root receives block r from rank r
		cs.counts[(cs.root+1)%cs.n], cs.counts[(cs.root+2)%cs.n] = 0, small
		for r := range cs.n {
			cs.srcDispls[r], cs.dstDispls[r] = randDispls(rnd, cs.counts), randDispls(rnd, cs.counts)
		}
	case cs.m != nil: // alltoallv: m[p][r] is what p sends r
		for r := range cs.n {
			cs.m[(r+1)%cs.n][r], cs.m[(r+2)%cs.n][r] = 0, small
		}
		for r := range cs.n {
			cs.srcDispls[r], cs.dstDispls[r] = randDispls(rnd, cs.m[r]), randDispls(rnd, cs.column(r))
		}
	}
}

// newOutputPair makes a 2-rank persistent linear gather of bytes whose root's output is
// staged (stageOutputs): the root holds it in buffers of its own, and its receive from
// its leaf arms ahead, in landing pieces. Its tasks are quiesced and closed at the end
// of t, before its team.
func newOutputPair(t *testing.T) (*fakeTeam, *collCase, []*rankRun, []driver.Task, *task) {
	t.Helper()
	smallPieces(t, 512)
	cs := plainCase(collective.Gather, "linear", 2, 0, eagerMaxFor(2)+5*landPiece+77, collective.Uint8, collective.OpSum)
	ft := newFakeTeam(t, 2, nil)
	runs := cs.build(t, ft.newSeq())
	tasks := make([]driver.Task, 2)
	stageOutputs(cs.c, runs, tasks, nil)
	for r, rr := range runs {
		k, err := ft.newTask(r, &rr.spec)
		require.NoError(t, err)
		tasks[r] = k
	}
	t.Cleanup(func() { ft.quiesce(t, tasks) })
	root := tasks[0].(*task)
	require.True(t, root.outDoubled, "the root's staged output has buffers of its own")
	require.Equal(t, 1, aheadOps(root))
	return ft, cs, runs, tasks, root
}

// TestOutputAheadLandsEarly: the leaf of a 2-rank persistent gather runs a post ahead of
// its root, whose output is staged: every landing piece and the end of the leaf's
// block land in the root's buffer of the next post while the root has not posted it.
// The root's post then takes the block without waiting, reports all of it landed at
// once, and the result is right.
func TestOutputAheadLandsEarly(t *testing.T) {
	rnd := testutil.Rand(t)
	ft, cs, runs, tasks, root := newOutputPair(t)
	want := cs.expect(t, runs, fill(rnd, runs))
	ft.run(t, tasks, 1)
	check(t, "post 1", runs, want)
	o := recvOf(root)
	for post := uint32(2); post <= 5; post++ {
		require.True(t, root.exposedAhead(o), "post %d: the leaf holds the root's RTR of this post", post)
		want := cs.expect(t, runs, fill(rnd, runs))
		require.NoError(t, tasks[1].Post(post))
		if !ft.pollUntil(t, pollTimeout, func() bool { done, _ := tasks[1].State(); return done }) {
			t.Fatalf("post %d: the leaf hangs: %s", post, waiting(tasks))
		}
		require.False(t, root.exposedAhead(o), "post %d: the leaf's data landed", post)
		require.Positive(t, o.aheadPieces, "post %d: the leaf's landing pieces were not counted ahead", post)
		landed := root.landedAhead
		require.NoError(t, tasks[0].Post(post))
		require.Equal(t, landed+1, root.landedAhead, "post %d: the root found the leaf's block in place", post)
		ft.finish(t, tasks, post, runs, want)
	}
}

// TestOutputAheadPieces: landing pieces of a post not started are counted, never more
// than a send of the receive's size has (more would be malformed), and the post that
// starts reports them landed at once, before the rest of the block arrives.
func TestOutputAheadPieces(t *testing.T) {
	rnd := testutil.Rand(t)
	ft, cs, runs, tasks, root := newOutputPair(t)
	var spans [][][2]int
	stageOutputs(cs.c, runs, tasks, &spans) // the spec is the task's copy: report through it
	root.landed = runs[0].spec.Landed
	want := cs.expect(t, runs, fill(rnd, runs))
	ft.run(t, tasks, 1)
	check(t, "post 1", runs, want)
	o := recvOf(root)
	piece := pieceOf(o.n)
	most := (o.n - 1) / piece
	require.GreaterOrEqual(t, most, 2, "the leaf's block is not sent in pieces")
	for range most + 3 {
		root.dataAhead(1, 2, o.tag, true)
	}
	require.EqualValues(t, most, o.aheadPieces, "pieces counted ahead")
	spans[0] = spans[0][:0]
	require.NoError(t, root.Post(2))
	require.Contains(t, spans[0], [2]int{o.out.off, most * piece}, "the pieces that came ahead are reported landed at the post")
	require.Equal(t, most*piece, o.landed)
	done, err := root.State()
	require.NoError(t, err)
	require.False(t, done, "the rest of the block has not come")
	root.Abort()
}

// TestOutputAheadUnpinned: where the staging scratch is pinned and the CUDA driver
// does not pin the transport's two buffers (pinBuffer fails at the first or the
// second), the output stays single and nothing of them is left allocated or
// registered: they are a speed-up, and the task goes on without them. Where both pin,
// the output is doubled (the control). The stand-in pin marks nothing, so this runs
// without CUDA.
func TestOutputAheadUnpinned(t *testing.T) {
	smallPieces(t, 512)
	old := pinBuffer
	t.Cleanup(func() { pinBuffer = old })
	for _, failAt := range []int{1, 2, 0} {
		t.Run(fmt.Sprintf("fail-at-%d", failAt), func(t *testing.T) {
			ft := newFakeTeam(t, 2, nil)
			cs := plainCase(collective.Gather, "linear", 2, 0, eagerMaxFor(2)+5*landPiece, collective.Uint8, collective.OpSum)
			runs := cs.build(t, ft.newSeq())
			k, err := ft.newTask(0, &runs[0].spec) // Landed unset: not doubled at NewTask
			require.NoError(t, err)
			root := k.(*task)
			defer func() { require.NoError(t, root.Close()) }()
			require.False(t, root.outDoubled)
			calls := 0
			pinBuffer = func(*mem.Buffer) error {
				if calls++; calls == failAt {
					return errors.New("test: not pinned")
				}
				return nil
			}
			root.landed, root.out.stream = func(int, int) {}, true // as if staged through pinned scratch
			bufs, live := len(root.bufs), mem.Live()
			require.NoError(t, root.doubleOutput(root.out))
			if failAt == 0 {
				require.True(t, root.outDoubled, "both buffers pinned: doubled")
				require.Equal(t, bufs+2, len(root.bufs))
				return
			}
			require.Equal(t, failAt, calls)
			require.False(t, root.outDoubled, "a buffer not pinned leaves the output single")
			require.Len(t, root.bufs, bufs)
			require.Equal(t, live, mem.Live(), "the buffer pinned first is freed")
			require.Nil(t, root.Output(2))
		})
	}
}
