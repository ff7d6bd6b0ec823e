package tlmlx5

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestLandedPieces: with landing pieces made small, every algorithm of the collectives
// that move blocks reports output ranges through TaskSpec.Landed that are final when
// reported (they already hold the post's result), and together with the completion
// they cover every output byte the post changes. Partial immediates of large sends
// thus tell the receiver what landed, without changing the data.
//
// Local copies into such an output of at least two copy pieces, made small too, go
// piece by piece between polls (pieces.go), each piece reported as it is copied;
// TestLandedPiecesPerPoll lets a Poll move several (pollPieces, the diagnosis build's
// IBCOLL_X_POLL_PIECES).
func TestLandedPieces(t *testing.T) { landedPieces(t) }

func TestLandedPiecesPerPoll(t *testing.T) {
	old := pollPieces
	pollPieces = 3
	t.Cleanup(func() { pollPieces = old })
	landedPieces(t)
}

// TestPollRepeatsPieces: with pollPieces above one, a Poll whose CQs give nothing
// moves more than one piece of a local copy. In a team of one rank no completion ever
// comes, so every Poll that finds pieces left must move up to pollPieces of them.
// (TestLandedPiecesPerPoll looks for such a Poll in 4-rank teams too, but there the
// peers' completions may come between every two pieces for 40 posts on a loaded
// machine, as CI under the race detector once saw.)
func TestPollRepeatsPieces(t *testing.T) {
	old := pollPieces
	pollPieces = 3
	t.Cleanup(func() { pollPieces = old })
	smallCopyPieces(t, 512)
	rnd := testutil.Rand(t)
	ft := newFakeTeam(t, 1, nil)
	cs := newCase(rnd, collective.Gather, "linear", 1, 0, 0, false)
	cs.count = 16 * copyPiece / cs.dt.Size()
	runs := cs.build(t, ft.newSeq())
	landed := 0
	runs[0].spec.Landed = func(off, n int) { landed += n } // the own block then goes in pieces
	runs[0].spec.Persistent = false
	k, err := ft.newTask(0, &runs[0].spec)
	require.NoError(t, err)
	tasks := []driver.Task{k}
	defer func() { ft.quiesce(t, tasks) }()
	repeats0 := ft.eps[0].(*team).pollRepeats
	want := cs.expect(t, runs, fill(rnd, runs))
	ft.run(t, tasks, 1)
	check(t, "one-rank gather in pieces", runs, want)
	require.Positive(t, k.(*task).copyPieces, "the own block went in pieces")
	require.Equal(t, cs.count*cs.dt.Size(), landed, "every byte reported landed")
	require.Positive(t, ft.eps[0].(*team).pollRepeats-repeats0, "no Poll moved more than one piece")
}

func landedPieces(t *testing.T) {
	smallPieces(t, 256)
	smallCopyPieces(t, 512)
	rnd := testutil.Rand(t)
	const n = 4
	ft := newFakeTeam(t, n, nil)
	for _, c := range []collective.Type{collective.Gather, collective.Gatherv, collective.Scatter, collective.Scatterv,
		collective.Bcast, collective.Allgather, collective.Allgatherv, collective.Alltoall, collective.Alltoallv} {
		for _, alg := range algNames(c) {
			if alg != "" && Fits(c, alg, n) != nil {
				continue
			}
			t.Run(fmt.Sprintf("%v/%s", c, alg), func(t *testing.T) {
				// Above the eager maximum (pieces go by ready-to-receive): a v-layout's
				// random counts are drawn again until some block is that large.
				cs := newCase(rnd, c, alg, n, n-1, n*(eagerMaxFor(n)+1001), false)
				for !hasBigBlock(cs, 2*eagerMaxFor(n)) {
					cs = newCase(rnd, c, alg, n, n-1, n*(eagerMaxFor(n)+1001), false)
				}
				repeats0 := make([]uint64, n)
				for r, ep := range ft.eps {
					repeats0[r] = ep.(*team).pollRepeats
				}
				runs := cs.build(t, ft.newSeq())
				type span struct{ off, n int }
				landed := make([][]span, n)
				var want [][2][]byte
				outOf := func(r int) []byte { // the output buffer of rank r, and want's index
					if c == collective.Bcast {
						return runs[r].src.b
					}
					return runs[r].dst.b
				}
				wantIdx := 1
				if c == collective.Bcast {
					wantIdx = 0
				}
				tasks := make([]driver.Task, n)
				defer func() { ft.quiesce(t, tasks) }()
				var post uint32
				doubled := 0
				for r, rr := range runs {
					rr.spec.Landed = func(off, m int) {
						// Where the task holds the output of a persistent post in a
						// buffer of its own, the range is there, and copied out as coll
						// does.
						got := outOf(r)[off : off+m]
						if b := tasks[r].(driver.OutputOwner).Output(post); b != nil {
							got = b.Bytes()[off : off+m]
						}
						exp := want[r][wantIdx][off : off+m]
						if !bytes.Equal(got, exp) {
							t.Errorf("rank %d: Landed(%d, %d) reported bytes that are not the result yet", r, off, m)
						}
						copy(outOf(r)[off:off+m], got)
						landed[r] = append(landed[r], span{off, m})
					}
					k, err := ft.newTask(r, &rr.spec)
					require.NoError(t, err)
					tasks[r] = k
				}
				partial, copied := 0, 0
				// A Poll moves a second piece only when the CQs gave nothing meanwhile; on a
				// loaded machine (the rxe VM beside other work) two posts may see a
				// completion at every Poll, so the posts go on, up to 40, until one did.
				needRepeats := localCopies(cs, 2*copyPiece) && pollPieces > 1
				repeatsNow := func() (n uint64) {
					for r, ep := range ft.eps {
						n += ep.(*team).pollRepeats - repeats0[r]
					}
					return n
				}
				for post = 1; post <= 2 || needRepeats && repeatsNow() == 0 && post <= 40; post++ {
					for r := range landed {
						landed[r] = landed[r][:0]
					}
					in := fill(rnd, runs)
					want = cs.expect(t, runs, in)
					ft.run(t, tasks, post)
					check(t, fmt.Sprintf("%v post %d", cs, post), runs, want)
					for r := range n {
						covered := make([]bool, len(outOf(r)))
						for _, s := range landed[r] {
							for i := s.off; i < s.off+s.n; i++ {
								covered[i] = true
							}
						}
						for i := range covered {
							if in[r][wantIdx][i] != want[r][wantIdx][i] && !covered[i] {
								t.Fatalf("rank %d: output byte %d changed but was never reported landed", r, i)
							}
						}
					}
				}
				for _, k := range tasks {
					partial += k.(*task).pieces
					copied += k.(*task).copyPieces
					if k.(*task).outDoubled {
						doubled++
					}
				}
				t.Logf("%d ranks held their output in buffers of their own", doubled)
				if cs.c != collective.Bcast || n > 1 {
					require.Positive(t, partial, "no landing piece was reported: the sends were never split")
				}
				if localCopies(cs, 2*copyPiece) {
					require.Positive(t, copied, "no local copy went in pieces")
					if needRepeats {
						// Asserted where no completion can come between pieces:
						// TestPollRepeatsPieces.
						t.Logf("Polls that moved more than one piece: %d in %d posts", repeatsNow(), post-1)
					}
				}
			})
		}
	}
}

// smallPieces makes landing pieces n bytes (pieceOf's least) until the test ends, so
// that sends of test sizes are written in many pieces.
func smallPieces(t *testing.T, n int) {
	old := landPiece
	landPiece = n
	t.Cleanup(func() { landPiece = old })
}

// localCopies reports whether some rank of cs copies a block of at least min bytes
// into its output locally: a rooted collective's root, every rank of allgather(v)
// and alltoall(v) (bcast copies nothing locally).
func localCopies(cs *collCase, min int) bool {
	switch cs.c {
	case collective.Bcast:
		return false
	case collective.Gather, collective.Scatter, collective.Allgather, collective.Alltoall:
		return cs.count*cs.dt.Size() >= min
	}
	for r, c := range cs.counts {
		if c*cs.dt.Size() >= min && (r == cs.root || cs.c == collective.Allgatherv) {
			return true
		}
	}
	for r, row := range cs.m {
		if row[r]*cs.dt.Size() >= min {
			return true
		}
	}
	return false
}

// hasBigBlock reports whether some block of a v-layout case has at least min bytes
// (cases without a v-layout always do here).
func hasBigBlock(cs *collCase, min int) bool {
	if cs.counts == nil && cs.m == nil {
		return true
	}
	// A block that goes over the wire: not a rooted collective's root block, nor
	// what an alltoallv rank keeps for itself, which are copied locally.
	rooted := cs.c == collective.Gatherv || cs.c == collective.Scatterv
	for r, c := range cs.counts {
		if c*cs.dt.Size() >= min && !(rooted && r == cs.root) {
			return true
		}
	}
	for p, row := range cs.m {
		for r, c := range row {
			if c*cs.dt.Size() >= min && p != r {
				return true
			}
		}
	}
	return false
}
