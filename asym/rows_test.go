package asym

import (
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/mem"
)

// TestStageSetRows: rows hold only for a staged output that copies out and whose spans
// are exactly the rows' bytes.
func TestStageSetRows(t *testing.T) {
	r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach()})
	n := r.blocks[0].n
	for _, c := range []struct {
		pitch, rows int
		ok          bool
	}{{n, pSize, true}, {n, pSize - 1, false}, {n / 2, 2 * pSize, true}, {n + 1, pSize, false},
		{0, pSize, false}, {-n, -pSize, false}, {n * pSize, 1, false}, {r.big / (maxRows + 1), maxRows + 1, false}} {
		r.stage.SetRows(c.pitch, c.rows)
		if c.ok {
			require.Equal(t, [2]int{c.pitch, c.rows}, [2]int{r.stage.rowPitch, r.stage.rowCount}, "%+v", c)
		} else {
			require.Zero(t, r.stage.rowCount, "%+v", c)
		}
	}
	// a gatherv's blocks leave gaps; a scatter root's scratch copies in
	for _, k := range []collective.Type{collective.Gatherv, collective.Scatter} {
		st, dt := mem.Host, mem.Sim
		if k == collective.Scatter {
			st, dt = dt, st
		}
		v := newRig(t, k, st, dt, rigOpts{reach: mem.DefaultReach()})
		v.stage.SetRows(v.big/pSize, pSize)
		require.Zero(t, v.stage.rowCount, "%v", k)
	}
}

// TestStageRows: a gather root's blocks land in pieces, interleaved across senders.
// Once the first pieces of enough consecutive blocks have landed, they go out as one
// copy of rows; a block whole on its own goes alone; a block that has not reported
// (the root's own, here) splits the rectangles around it; Complete copies the rest.
func TestStageRows(t *testing.T) {
	r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach()})
	rng := newRand(t)
	n := r.blocks[0].n
	piece := n / 4
	r.stage.earlyMin, r.stage.batchMin = 0, 2*piece
	r.stage.SetRows(n, pSize)
	want := make([]byte, r.big)
	fill(rng, want)
	r.write(r.dst, 0, want)
	require.NoError(t, r.stage.CopyIn())
	dst := r.buf(r.stage.Dst())
	land := func(row, k, pieces int) {
		off := row*n + k*piece
		p := make([]byte, pieces*piece)
		fill(rng, p)
		r.write(dst, off, p)
		copy(want[off:], p)
		r.stage.Landed(off, len(p))
	}
	early := func() []Span { return append([]Span(nil), r.stage.sides[1].early...) }
	land(0, 0, 1)
	require.Empty(t, early(), "one piece is less than a copy's worth")
	land(1, 0, 1)
	require.Equal(t, []Span{{0, piece}, {n, piece}}, early(), "rows 0 and 1 as one copy")
	land(3, 1, 3)
	require.Len(t, early(), 2, "row 3 has no first piece: nothing from its front on")
	land(3, 0, 1)
	require.Equal(t, Span{3 * n, n}, early()[2], "row 3, whole, alone")
	land(0, 1, 1)
	require.Len(t, early(), 3, "row 1 at the same front has nothing new: row 0 alone is short")
	land(1, 1, 2)
	require.Equal(t, []Span{{piece, piece}, {n + piece, piece}}, early()[3:5], "rows 0 and 1 from their fronts, as wide as the narrower")
	land(0, 2, 2)
	require.Equal(t, []Span{{2 * piece, piece}, {n + 2*piece, piece}}, early()[5:],
		"rows 0 and 1 again, at one piece (row 1's third), over one row of two")
	require.Equal(t, []int{3 * piece, 3 * piece, 0, n}, r.stage.fronts)
	land(1, 3, 1)
	require.Equal(t, []Span{{3 * piece, piece}, {n + 3*piece, piece}}, early()[7:])
	require.Equal(t, []int{n, n, 0, n}, r.stage.fronts)
	// Row 2 (the root's own block) never reports: Complete copies it.
	mine := make([]byte, n)
	fill(rng, mine)
	r.write(dst, 2*n, mine)
	copy(want[2*n:], mine)
	require.NoError(t, r.stage.Complete(nil))
	require.Equal(t, want, r.read(r.dst, 0, r.big), "user's dst after the post")
	rep := r.stage.Report()
	require.Equal(t, int64(r.big), rep.Copied, "every byte copied out once")
	require.Equal(t, int64(4), rep.Dst.RowCopies)
	require.Contains(t, rep.Dst.String(), "copy-out as blocks land, 4 copies of several blocks at once")
}

// TestStageRowsRandom: 200 posts whose blocks land in pieces of random sizes in a
// random interleaving, some pieces reported twice, with every batching: after each
// post the user's buffer is right and every planned byte was copied at least once.
func TestStageRowsRandom(t *testing.T) {
	for _, batch := range []int{0, 8, 64, 1 << 30} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach(), byAddr: batch == 8})
			rng := newRand(t)
			n := r.blocks[0].n
			r.stage.earlyMin, r.stage.batchMin = 0, batch
			r.stage.SetRows(n, pSize)
			require.Equal(t, pSize, r.stage.rowCount)
			want := make([]byte, r.big)
			var copied int64
			for post := range 200 {
				fill(rng, want)
				require.NoError(t, r.stage.CopyIn())
				dst := r.buf(r.stage.Dst())
				// each row's pieces in order, the rows interleaved at random
				next := make([]int, pSize)
				for left := pSize * n; left > 0; {
					row := rng.IntN(pSize)
					if next[row] == n {
						continue
					}
					k := min(n-next[row], 1+rng.IntN(n/2))
					off := row*n + next[row]
					r.write(dst, off, want[off:off+k])
					next[row] += k
					left -= k
					if row != pRoot || rng.IntN(2) == 0 {
						r.stage.Landed(off, k)
						if rng.IntN(8) == 0 {
							r.stage.Landed(off, k) // reported again: copied again, harmless
						}
					}
				}
				require.NoError(t, r.stage.Complete(nil))
				require.Equal(t, want, r.read(r.dst, 0, r.big), "post %d", post)
				copied += int64(r.big)
				require.GreaterOrEqual(t, r.stage.Report().Copied, copied, "post %d", post)
			}
		})
	}
}

// TestBestRect: the largest rectangle of consecutive rows at equal fronts, as wide as
// its narrowest row; on a tie, the one of more rows.
func TestBestRect(t *testing.T) {
	for _, c := range []struct {
		fronts, avail []int
		lo, n, w      int
	}{
		{[]int{0, 0, 0, 0}, []int{0, 0, 0, 0}, 0, 0, 0},
		{[]int{0, 0, 0, 0, 0, 0}, []int{0, 4, 4, 4, 4, 1}, 1, 4, 4}, // whole blocks of a subtree, then a piece
		{[]int{0, 0, 0, 0}, []int{2, 2, 2, 5}, 0, 4, 2},             // 8 over 4 rows beats 5 in one
		{[]int{0, 0, 0, 0}, []int{2, 2, 1, 7}, 3, 1, 7},
		{[]int{0, 0, 3, 3}, []int{3, 3, 3, 3}, 0, 2, 3}, // fronts split the run: a tie, the first
		{[]int{0, 0, 3, 3}, []int{2, 2, 3, 3}, 2, 2, 3},
		{[]int{1, 1, 1}, []int{2, 0, 2}, 0, 1, 2}, // a row with nothing ends a rectangle
		{[]int{0, 0}, []int{4, 2}, 0, 2, 2},       // 4 either way: two rows
	} {
		s := &Stage{stageState: stageState{rowCount: len(c.fronts), fronts: c.fronts, avail: c.avail}}
		lo, n, w := s.bestRect()
		require.Equal(t, [3]int{c.lo, c.n, c.w}, [3]int{lo, n, w}, "fronts %v avail %v", c.fronts, c.avail)
	}
}

// TestCutRows: the ranges of a rectangle leave the landed list, which keeps the rest
// in order, split where a range lay inside a span.
func TestCutRows(t *testing.T) {
	spans := []Span{{0, 10}, {20, 40}, {70, 5}}
	require.Equal(t, []Span{{0, 10}, {22, 8}, {32, 8}, {42, 18}, {70, 5}}, cutRows(nil, spans, 20, 2, 10, 3))
	require.Equal(t, []Span{{4, 6}, {24, 36}, {70, 5}}, cutRows(nil, spans, 0, 4, 20, 2))
	require.Equal(t, []Span{{0, 10}, {20, 40}}, cutRows(spans[:0:0], spans, 70, 5, 5, 1))
	require.Equal(t, []Span{{0, 10}, {20, 40}, {70, 5}}, spans, "the input is left alone")
}

// TestStageRowsNoAllocs: a steady-state post whose blocks go out by rows allocates
// nothing, its copy stream coming from a pool as coll's does.
func TestStageRowsNoAllocs(t *testing.T) {
	r := newRig(t, collective.Gather, mem.Host, mem.Sim, rigOpts{reach: mem.DefaultReach()})
	n := r.blocks[0].n
	piece := n / 4
	r.stage.earlyMin, r.stage.batchMin = 0, 2*piece
	r.stage.SetRows(n, pSize)
	pool := newStreamPool(t)
	r.stage.opts.getStream, r.stage.opts.putStream = pool.get, pool.put
	post := func() {
		if err := r.stage.CopyIn(); err != nil {
			t.Fatal(err)
		}
		for k := range 4 {
			for row := range pSize {
				r.stage.Landed(row*n+k*piece, piece)
			}
		}
		if err := r.stage.Complete(nil); err != nil {
			t.Fatal(err)
		}
	}
	post()
	before := r.stage.Report().Dst.RowCopies
	require.Zero(t, testing.AllocsPerRun(100, post))
	require.Greater(t, r.stage.Report().Dst.RowCopies, before, "the posts copied rows")
}

// streamPool keeps one stream for reuse.
type streamPool struct{ s *mem.Stream }

func newStreamPool(t *testing.T) *streamPool {
	p := &streamPool{}
	t.Cleanup(func() {
		if p.s != nil {
			require.NoError(t, p.s.Close())
		}
	})
	return p
}

func (p *streamPool) get() (*mem.Stream, error) {
	if s := p.s; s != nil {
		p.s = nil
		return s, nil
	}
	return mem.NewStream()
}

func (p *streamPool) put(s *mem.Stream) error { p.s = s; return nil }

// TestStageReinitNoAllocs: a Stage closed and initialized again for the same gather
// root (as coll's Team.Run reuses a request), planned with PlanInto into the same
// Staging, with rows and blocks copied out as they land, allocates nothing per cycle
// once warm: Init keeps the lists' backing arrays, PlanInto the spans'. The scratch
// comes from a one-buffer pool and the registration is kept, as coll's scratch cache
// does.
func TestStageReinitNoAllocs(t *testing.T) {
	const n, blk = pSize, 64 << 10
	piece := blk / 4
	a := Args{Coll: collective.Gather, Root: 0, Rank: 0, Size: n, DtypeSize: 1,
		Src: Buf{Type: mem.Host, Count: blk}, Dst: Buf{Type: mem.Sim, Count: n * blk}}
	src, dst := newBuf(t, mem.Host, blk), newBuf(t, mem.Sim, n*blk)
	var kept *mem.Buffer
	t.Cleanup(func() {
		if kept != nil {
			require.NoError(t, kept.Close())
		}
	})
	alloc := func(typ mem.Type, size int) (*mem.Buffer, error) {
		if b := kept; b != nil && b.Type() == typ && b.Len() == size {
			kept = nil
			return b, nil
		}
		return mem.Alloc(typ, size)
	}
	free := func(b *mem.Buffer) error {
		if kept != nil {
			return b.Close()
		}
		kept = b
		return nil
	}
	pool := newStreamPool(t)
	opts := []Option{WithAlloc(alloc), WithFree(free), WithStreams(pool.get, pool.put)}
	var (
		plan Staging
		s    Stage
		rows int64
	)
	cycle := func() {
		require.NoError(t, PlanInto(&plan, a, mem.DefaultReach()))
		require.NoError(t, s.Init(plan, UserBufOf(src), UserBufOf(dst), keptRegistrar{}, opts...))
		s.earlyMin, s.batchMin = 0, 2*piece
		s.SetRows(blk, n)
		require.NoError(t, s.CopyIn())
		for k := range 4 {
			for row := range n {
				s.Landed(row*blk+k*piece, piece)
			}
		}
		require.NoError(t, s.Complete(nil))
		rows += s.Report().Dst.RowCopies
		require.NoError(t, s.Close())
	}
	cycle()
	require.True(t, plan.Dst.Needed, "sim memory is not staged")
	require.Zero(t, testing.AllocsPerRun(50, cycle), "a stage made again for the same collective allocates")
	require.Positive(t, rows, "the posts copied no rows")
}

// keptRegistrar registers nothing and hands out one closer, as coll's scratch cache
// does for a buffer whose registration it keeps.
type keptRegistrar struct{}

func (keptRegistrar) Register(*mem.Buffer) (io.Closer, error) { return keptRegistrar{}, nil }
func (keptRegistrar) Close() error                            { return nil }
