package tlmlx5

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestSourceInPieces: a source copied in beside the wire (TaskSpec.Ready) reaches the
// transport a little at a time, as staging's copy-in does, and every algorithm of the
// collectives that send blocks from it still delivers exact data, over two posts of
// fresh data. Until Ready accepts a range, the source holds garbage there, and Ready
// writes the post's bytes in only when the transport asked for them and was refused
// once (the copy-in runs on while the transport polls), so a send that read a byte
// before Ready accepted it would deliver garbage. It also asserts that some send put
// its first pieces on the wire while later ones were still being copied in (srcAhead):
// a run in which every send waited for its whole block tested nothing new.
//
// A root's own block, copied locally in pieces into an output that reports landed
// ranges (pieces.go), follows its source the same way: each piece waits for its own
// bytes only, and some copy must have waited midway (copyWaited).
func TestSourceInPieces(t *testing.T) {
	smallPieces(t, 256)
	smallCopyPieces(t, 512)
	rnd := testutil.Rand(t)
	const n = 4
	ft := newFakeTeam(t, n, nil)
	totalAhead, totalWaited := 0, 0
	defer func() {
		if !t.Failed() {
			require.Positive(t, totalAhead, "no send went on the wire before its whole block was copied in")
			require.Positive(t, totalWaited, "no local copy in pieces went ahead of its source's copy-in")
		}
	}()
	for _, c := range []collective.Type{collective.Gather, collective.Gatherv, collective.Scatter, collective.Scatterv,
		collective.Bcast, collective.Allgather, collective.Allgatherv, collective.Alltoall, collective.Alltoallv} {
		for _, alg := range algNames(c) {
			if alg != "" && Fits(c, alg, n) != nil {
				continue
			}
			t.Run(fmt.Sprintf("%v/%s", c, alg), func(t *testing.T) {
				cs := newCase(rnd, c, alg, n, rnd.IntN(n), n*(eagerMaxFor(n)+1001), false)
				for !hasBigBlock(cs, 2*eagerMaxFor(n)) {
					cs = newCase(rnd, c, alg, n, rnd.IntN(n), n*(eagerMaxFor(n)+1001), false)
				}
				runs := cs.build(t, ft.newSeq())
				// Per rank: the post's source, and how much of it is in place.
				real, limit := make([][]byte, n), make([]int, n)
				const step = 700 // not a multiple of a piece: ranges end mid-piece
				asked := 0
				for r, rr := range runs {
					if c == collective.Bcast && r != cs.root {
						continue // a bcast leaf's src is its output, never copied in
					}
					rr.spec.Ready = func(off, m int) (bool, error) {
						asked++
						if off+m <= limit[r] {
							return true, nil
						}
						// Refused: the copy-in moves one step on, for a later poll.
						hi := min(len(real[r]), limit[r]+step)
						copy(runs[r].src.b[limit[r]:hi], real[r][limit[r]:hi])
						limit[r] = hi
						return false, nil
					}
				}
				tasks := make([]driver.Task, n)
				defer func() { ft.quiesce(t, tasks) }()
				var post uint32
				for r, rr := range runs {
					if c == collective.Bcast {
						continue // its output is its src, which Ready gates
					}
					// Landed ranges make local copies go in pieces; where the task holds
					// the output in a buffer of its own, the range is copied out of it, as
					// coll does.
					rr.spec.Landed = func(off, m int) {
						if b := tasks[r].(driver.OutputOwner).Output(post); b != nil {
							copy(runs[r].dst.b[off:off+m], b.Bytes()[off:off+m])
						}
					}
				}
				for r, rr := range runs {
					k, err := ft.newTask(r, &rr.spec)
					require.NoError(t, err)
					tasks[r] = k
				}
				for post = 1; post <= 2; post++ {
					in := fill(rnd, runs)
					want := cs.expect(t, runs, in)
					for r, rr := range runs {
						real[r], limit[r] = in[r][0], 0
						if rr.spec.Ready != nil {
							testutil.Fill(rnd, rr.src.b) // garbage until copied in
						}
					}
					ft.run(t, tasks, post)
					for r, rr := range runs { // the copy-in ends before the post does
						if rr.spec.Ready == nil {
							continue
						}
						copy(rr.src.b[limit[r]:], real[r][limit[r]:])
					}
					check(t, fmt.Sprintf("%v post %d", cs, post), runs, want)
				}
				ahead := 0
				for _, k := range tasks {
					ahead += k.(*task).srcAhead
					totalWaited += k.(*task).copyWaited
				}
				require.Positive(t, asked, "the transport never asked whether its source was in place")
				t.Logf("%d bytes went on the wire ahead of the rest of their send's source", ahead)
				totalAhead += ahead
			})
		}
	}
}

// TestPartialSendAbort: a gather leaf's send is partly on the wire (its source only
// partly in place) when its task aborts, or when the copy-in fails (Ready returns an
// error, which must fail the task); every task then quiesces, and two more posts of
// the same persistent tasks deliver exact data. (A review's test, session 27.)
func TestPartialSendAbort(t *testing.T) {
	for _, mode := range []string{"abort", "readyerr"} {
		t.Run(mode, func(t *testing.T) {
			smallPieces(t, 256)
			rnd := testutil.Rand(t)
			const n = 3
			cs := plainCase(collective.Gather, "linear", n, 0, eagerMaxFor(n)+20*256+77, collective.Uint8, 0)
			ft := newFakeTeam(t, n, nil)
			runs := cs.build(t, ft.newSeq())
			limit, fail := 5*256, false
			for r := 1; r < n; r++ {
				runs[r].spec.Ready = func(off, m int) (bool, error) {
					if off+m <= limit {
						return true, nil
					}
					if fail {
						return false, errors.New("copy-in broke")
					}
					return false, nil
				}
			}
			tasks := ft.newTasks(t, runs)
			defer func() { ft.quiesce(t, tasks) }()
			fill(rnd, runs)
			for _, k := range tasks {
				require.NoError(t, k.Post(1))
			}
			leaf := tasks[1].(*task)
			var so *op
			for i := range leaf.ops {
				if leaf.ops[i].kind == opSend {
					so = &leaf.ops[i]
				}
			}
			require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return so.early > 0 && leaf.outstanding == 0 }))
			if mode == "readyerr" {
				fail = true
				ft.poll(t)
				_, err := leaf.State()
				require.Error(t, err)
			}
			for _, k := range tasks {
				k.Abort()
			}
			require.True(t, ft.pollUntil(t, pollTimeout, func() bool {
				for _, k := range tasks {
					if !k.Quiesced() {
						return false
					}
				}
				return true
			}))
			fail, limit = false, 1<<30
			for post := uint32(2); post <= 3; post++ {
				in := fill(rnd, runs)
				want := cs.expect(t, runs, in)
				ft.run(t, tasks, post)
				check(t, fmt.Sprintf("post %d", post), runs, want)
			}
		})
	}
}

// TestWaitingPartialSend: a task aborted while a send is partly on the wire says, in
// Waiting (which coll's abort-drain error quotes), that it waits for that write, not
// only for the copy-in of its source. (A review's test, session 27.)
func TestWaitingPartialSend(t *testing.T) {
	smallPieces(t, 256)
	const n = 2
	cs := plainCase(collective.Gather, "linear", n, 0, eagerMaxFor(n)+20*256+77, collective.Uint8, 0)
	ft := newFakeTeam(t, n, nil)
	runs := cs.build(t, ft.newSeq())
	limit := 5 * 256
	runs[1].spec.Ready = func(off, m int) (bool, error) { return off+m <= limit, nil }
	tasks := ft.newTasks(t, runs)
	defer func() { ft.quiesce(t, tasks) }()
	fill(testutil.Rand(t), runs)
	for _, k := range tasks {
		require.NoError(t, k.Post(1))
	}
	leaf := tasks[1].(*task)
	require.True(t, ft.pollUntil(t, pollTimeout, func() bool { return leaf.outstanding > 0 }))
	leaf.Abort()
	require.False(t, leaf.Quiesced())
	require.Contains(t, leaf.Waiting(), "the write to rank 0", "Waiting: %q", leaf.Waiting())
}
