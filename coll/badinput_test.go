package coll_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// TestWrapperWholeElements: Reduce and Allreduce take byte slices and derive the
// element count from their length. A length that is not a whole number of elements
// is refused naming the slice, where it used to reduce the whole elements and leave
// the rest of dst untouched (7 bytes of float32: one element), or succeed doing
// nothing (3 bytes). The refusal takes the collective's number, as Init's own
// refusals do: the other ranks fail that collective at once (ErrPeerFailed), and the
// team stays in step.
func TestWrapperWholeElements(t *testing.T) {
	w := newWorld(t, 2, coll.Config{Timeout: 5 * time.Second})
	bg := context.Background()
	good := func() []byte { return make([]byte, 8) }
	for _, c := range []struct {
		name     string
		src, dst int
		want     string
	}{{"7-byte src", 7, 8, "src holds 7 bytes"}, {"3-byte vectors", 3, 3, "src holds 3 bytes"}, {"6-byte dst", 8, 6, "dst holds 6 bytes"}} {
		errs := w.run(func(r *rank) error {
			if r.r == 0 {
				return r.team.Allreduce(bg, make([]byte, c.src), make([]byte, c.dst), coll.Float32, coll.OpSum)
			}
			return r.team.Allreduce(bg, good(), good(), coll.Float32, coll.OpSum)
		})
		require.ErrorIs(t, errs[0], coll.ErrInvalid, "%s: Allreduce", c.name)
		require.ErrorContains(t, errs[0], "coll: Allreduce: "+c.want)
		require.ErrorIs(t, errs[1], coll.ErrPeerFailed, "%s: Allreduce, the peer", c.name)

		errs = w.run(func(r *rank) error {
			if r.r == 0 { // the root: its dst counts
				return r.team.Reduce(bg, make([]byte, c.src), make([]byte, c.dst), coll.Float32, coll.OpSum, 0)
			}
			return r.team.Reduce(bg, good(), nil, coll.Float32, coll.OpSum, 0)
		})
		require.ErrorIs(t, errs[0], coll.ErrInvalid, "%s: Reduce", c.name)
		require.ErrorContains(t, errs[0], "coll: Reduce: "+c.want)
		require.ErrorIs(t, errs[1], coll.ErrPeerFailed, "%s: Reduce, the peer", c.name)
	}
	w.mustRun(func(r *rank) error {
		return r.team.Allreduce(bg, good(), good(), coll.Float32, coll.OpSum)
	})
}

// TestOverlappingBuffers: a rank's Src and Dst that share bytes (and are not one
// buffer in place, which InPlace says) are refused at Init naming both. Before, an
// allreduce failed at Post with the kernels' "srcs[0] partly overlaps dst", and a
// gather moved whatever the overlap left.
func TestOverlappingBuffers(t *testing.T) {
	w := newWorld(t, 2, coll.Config{Timeout: 5 * time.Second})
	buf := make([]byte, 64)
	for _, a := range []coll.Args{
		{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum, Src: coll.BufferDesc{Slice: buf[:32], Count: 8},
			Dst: coll.BufferDesc{Slice: buf[4:36], Count: 8}},
		{Type: coll.Allgather, DType: coll.Uint8, Src: coll.BufferDesc{Slice: buf[:8], Count: 8},
			Dst: coll.BufferDesc{Slice: buf, Count: 16}},
		{Type: coll.Alltoall, DType: coll.Uint8, Src: coll.BufferDesc{Slice: buf[:16], Count: 16},
			Dst: coll.BufferDesc{Slice: buf[:16], Count: 16}},
	} {
		_, err := w.ranks[0].team.Init(a)
		require.ErrorIs(t, err, coll.ErrInvalid, "%v", a.Type)
		require.ErrorContains(t, err, "Args.Src", "%v", a.Type)
		require.ErrorContains(t, err, "Args.Dst", "%v", a.Type)
		require.ErrorContains(t, err, "overlap", "%v", a.Type)
		require.Error(t, w.ranks[1].team.Barrier(context.Background()), "rank 1 hears of rank 0's failed Init")
	}
	// Disjoint halves of one slice are two buffers.
	w.mustRun(func(r *rank) error {
		b := make([]byte, 48)
		return r.team.Run(context.Background(), coll.Args{Type: coll.Allgather, DType: coll.Uint8,
			Src: coll.BufferDesc{Slice: b[:16], Count: 16}, Dst: coll.BufferDesc{Slice: b[16:], Count: 32}})
	})
}

// TestOverlappingVBuffers: where one buffer is a v-layout, Init compares the other
// buffer with its non-empty blocks, not with its whole span: a gatherv root's Src that
// meets one of Dst's blocks (or a scatterv root's Dst one of Src's) is refused, and one
// that lies in a gap between blocks runs, with the gap's bytes read or written as the
// collective says and nothing else touched. It compared nothing for v-layouts, so the
// root's own block was copied over bytes that a peer's block then overwrote.
// Dst blocks that overlap each other are refused too, naming both.
func TestOverlappingVBuffers(t *testing.T) {
	w := newWorld(t, 2, coll.Config{Timeout: 5 * time.Second})
	bg := context.Background()
	v := func(buf []byte) coll.BufferDesc { // blocks [0, 8) and [16, 24), a gap between
		return coll.BufferDesc{Slice: buf, Counts: []int{8, 8}, Displs: []int{0, 16}}
	}
	buf := make([]byte, 32)
	for _, c := range []struct {
		a    coll.Args
		want []string
	}{
		{coll.Args{Type: coll.Gatherv, DType: coll.Uint8, Src: coll.BufferDesc{Slice: buf[4:12], Count: 8}, Dst: v(buf)},
			[]string{"Args.Src", "Args.Dst", "overlap"}},
		{coll.Args{Type: coll.Scatterv, DType: coll.Uint8, Src: v(buf), Dst: coll.BufferDesc{Slice: buf[12:20], Count: 8}},
			[]string{"Args.Src", "Args.Dst", "overlap"}},
		{coll.Args{Type: coll.Gatherv, DType: coll.Uint8, Src: coll.BufferDesc{Slice: make([]byte, 8), Count: 8},
			Dst: coll.BufferDesc{Slice: buf, Counts: []int{8, 8}, Displs: []int{0, 4}}},
			[]string{"Args.Dst blocks 0 and 1 share elements"}},
	} {
		_, err := w.ranks[0].team.Init(c.a)
		require.ErrorIs(t, err, coll.ErrInvalid, "%v", c.a.Type)
		for _, want := range c.want {
			require.ErrorContains(t, err, want, "%v", c.a.Type)
		}
		require.Error(t, w.ranks[1].team.Barrier(bg), "rank 1 hears of rank 0's failed Init")
	}

	rnd := testutil.Rand(t)
	fill := func(b []byte) []byte { testutil.Fill(rnd, b); return b }
	// gatherv: the root's Src in Dst's gap. The gap keeps the Src bytes.
	root := fill(make([]byte, 32))
	want := append([]byte(nil), root...)
	leaf := fill(make([]byte, 8))
	copy(want[0:8], root[8:16])
	copy(want[16:24], leaf)
	w.mustRun(func(r *rank) error {
		if r.r == 0 {
			return r.team.Run(bg, coll.Args{Type: coll.Gatherv, DType: coll.Uint8,
				Src: coll.BufferDesc{Slice: root[8:16], Count: 8}, Dst: v(root)})
		}
		return r.team.Run(bg, coll.Args{Type: coll.Gatherv, DType: coll.Uint8, Src: coll.BufferDesc{Slice: leaf, Count: 8}})
	})
	require.Equal(t, want, root, "gatherv with the root's Src in Dst's gap")

	// scatterv: the root's Dst in Src's gap, written with the root's own block only.
	root = fill(make([]byte, 32))
	want = append([]byte(nil), root...)
	copy(want[8:16], root[0:8])
	leafDst := make([]byte, 8)
	w.mustRun(func(r *rank) error {
		if r.r == 0 {
			return r.team.Run(bg, coll.Args{Type: coll.Scatterv, DType: coll.Uint8,
				Src: v(root), Dst: coll.BufferDesc{Slice: root[8:16], Count: 8}})
		}
		return r.team.Run(bg, coll.Args{Type: coll.Scatterv, DType: coll.Uint8, Dst: coll.BufferDesc{Slice: leafDst, Count: 8}})
	})
	require.Equal(t, want, root, "scatterv with the root's Dst in Src's gap")
	require.Equal(t, want[16:24], leafDst)
}

// TestBadAlgorithmAtNewContext: an algorithm name that the transport does not have is
// refused by NewContext, naming Config.Algs or the variable it came from, instead of
// failing every later Init of that collective.
func TestBadAlgorithmAtNewContext(t *testing.T) {
	cfg := coll.Config{Device: device()}
	for _, alg := range []string{"nonesuch", "knomial:1", "linear:4"} {
		c := cfg
		c.Algs = map[coll.CollType]string{coll.Gather: alg}
		_, err := coll.NewContext(c)
		require.ErrorIs(t, err, coll.ErrInvalid, alg)
		require.ErrorContains(t, err, "Config.Algs[gather]", alg)
		require.ErrorContains(t, err, alg)
	}
	env := map[string]string{coll.AlgEnvPrefix + "GATHER": "nonesuch"}
	c, err := coll.ConfigFromEnv(cfg, func(k string) string { return env[k] })
	require.NoError(t, err, "the name is the transport's to judge")
	_, err = coll.NewContext(c)
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.ErrorContains(t, err, "$IBCOLL_ALG_GATHER (Config.Algs[gather])")
	c.Algs[coll.Gather] = "knomial:4" // replaced after ConfigFromEnv: valid, and not the variable's
	ctx, err := coll.NewContext(c)
	require.NoError(t, err)
	require.NoError(t, ctx.Close())
}

// hugeOOB says the team is larger than any machine: NewTeam must refuse it, not
// allocate by it (1<<40 ranks was a fatal out-of-memory).
type hugeOOB struct{ coll.OOB }

func (hugeOOB) Rank() int { return 0 }
func (hugeOOB) Size() int { return 1 << 40 }

// nilMailboxOOB is an OOB whose Mailbox returns neither a mailbox nor an error.
type nilMailboxOOB struct{ coll.OOB }

func (nilMailboxOOB) Mailbox() (coll.Mailbox, error) { return nil, nil }

// TestNewTeamBadOOB: an OOB that reports more than MaxTeamSize ranks is refused naming
// the size; one rank whose Messenger gives a nil mailbox fails NewTeam on every rank
// (it crashed the process from the team's background goroutine after NewTeam
// succeeded).
func TestNewTeamBadOOB(t *testing.T) {
	ctx, err := coll.NewContext(coll.Config{Device: device()})
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Close()) }()
	_, err = ctx.NewTeam(context.Background(), hugeOOB{coll.LocalOOB(1)[0]})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.ErrorContains(t, err, "MaxTeamSize")

	oobs := coll.LocalOOB(3)
	_, ok := oobs[1].(coll.Messenger)
	require.True(t, ok, "LocalOOB is a Messenger: the test needs one")
	oobs[1] = nilMailboxOOB{oobs[1]}
	errs := make([]error, len(oobs))
	var wg sync.WaitGroup
	for i, o := range oobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := coll.NewContext(coll.Config{Device: device(), Timeout: 10 * time.Second})
			if err != nil {
				errs[i] = err
				return
			}
			tm, err := c.NewTeam(context.Background(), o)
			if err == nil {
				err = errors.Join(errors.New("NewTeam succeeded"), tm.Close())
			}
			errs[i] = errors.Join(err, c.Close())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.Error(t, err, "rank %d", i)
		require.NotContains(t, err.Error(), "NewTeam succeeded", "rank %d", i)
	}
	require.ErrorContains(t, errs[1], "Mailbox returned neither a mailbox nor an error")
}

// TestNilAndZeroValues: every method of a nil or zero Team, Context and Request (which
// no constructor made) returns an error naming the call, or its documented zero
// answer: no panic, and no mutex left locked (a zero Context's AllocDM panicked
// holding its lock, and its Close then hung).
func TestNilAndZeroValues(t *testing.T) {
	bg := context.Background()
	for name, tm := range map[string]*coll.Team{"nil": nil, "zero": {}} {
		_, err := tm.Init(coll.Args{Type: coll.Barrier})
		require.ErrorIs(t, err, coll.ErrInvalid, "%s Team Init", name)
		require.ErrorIs(t, tm.InitInto(new(coll.Request), coll.Args{Type: coll.Barrier}), coll.ErrInvalid, "%s Team InitInto", name)
		require.ErrorIs(t, tm.InitInto(nil, coll.Args{Type: coll.Barrier}), coll.ErrInvalid, "%s Team InitInto nil", name)
		require.ErrorIs(t, tm.Barrier(bg), coll.ErrInvalid, "%s Team Barrier", name)
		require.ErrorIs(t, tm.Allreduce(bg, make([]byte, 3), make([]byte, 3), coll.Float32, coll.OpSum), coll.ErrInvalid, "%s Team Allreduce", name)
		require.ErrorIs(t, tm.Broken(), coll.ErrInvalid, "%s Team Broken", name)
		require.Zero(t, tm.Links(), "%s Team Links", name)
		require.Nil(t, tm.Dead(), "%s Team Dead", name)
		require.Zero(t, tm.FaultSteps(coll.FaultAlloc), "%s Team FaultSteps", name)
		require.NoError(t, tm.Close(), "%s Team Close: nothing to release", name)
	}
	var nilTeam *coll.Team
	require.Equal(t, -1, nilTeam.Rank())
	require.Zero(t, nilTeam.Size())

	for name, c := range map[string]*coll.Context{"nil": nil, "zero": {}} {
		_, err := c.NewTeam(bg, coll.LocalOOB(1)[0])
		require.ErrorIs(t, err, coll.ErrInvalid, "%s Context NewTeam", name)
		_, err = c.AllocDM(64)
		require.ErrorIs(t, err, coll.ErrInvalid, "%s Context AllocDM", name)
		require.Equal(t, coll.Config{}, c.Config(), "%s Context Config", name)
		done := make(chan error, 1)
		go func() { done <- c.Close() }()
		select {
		case err := <-done:
			require.NoError(t, err, "%s Context Close", name)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s Context Close hangs", name)
		}
	}

	for name, r := range map[string]*coll.Request{"nil": nil, "zero": {}} {
		require.ErrorIs(t, r.Post(), coll.ErrInvalid, "%s Request Post", name)
		_, err := r.Test()
		require.ErrorIs(t, err, coll.ErrInvalid, "%s Request Test", name)
		require.ErrorIs(t, r.Wait(bg), coll.ErrInvalid, "%s Request Wait", name)
		require.Equal(t, coll.StagingReport{}, r.Staging(), "%s Request Staging", name)
		require.Zero(t, r.Seq(), "%s Request Seq", name)
		require.Empty(t, r.Alg(), "%s Request Alg", name)
		require.NoError(t, r.Close(), "%s Request Close", name)
	}
}

// TestRefusalsKeepNumbering: a Run refused for a nil context, and a wrapper refused
// for its byte counts with a nil context too, take the collective's number on the
// refusing rank as Init's refusals do: the peers fail that collective at once, and
// the next one pairs up (review found a nil context before a bad length numbered the
// collective, and one before a good length did not).
func TestRefusalsKeepNumbering(t *testing.T) {
	w := newWorld(t, 2, coll.Config{Timeout: 5 * time.Second})
	bg := context.Background()
	good := func() []byte { return make([]byte, 8) }
	for _, bad := range []func(tm *coll.Team) error{
		//nolint:staticcheck // the nil context is the input under test
		func(tm *coll.Team) error { return tm.Allreduce(nil, good(), good(), coll.Float32, coll.OpSum) },
		//nolint:staticcheck
		func(tm *coll.Team) error { return tm.Allreduce(nil, make([]byte, 7), good(), coll.Float32, coll.OpSum) },
		func(tm *coll.Team) error { return tm.Allreduce(bg, make([]byte, 7), good(), coll.Float32, coll.OpSum) },
	} {
		errs := w.run(func(r *rank) error {
			if r.r == 0 {
				return bad(r.team)
			}
			return r.team.Allreduce(bg, good(), good(), coll.Float32, coll.OpSum)
		})
		require.ErrorIs(t, errs[0], coll.ErrInvalid)
		require.ErrorIs(t, errs[1], coll.ErrPeerFailed)
		w.mustRun(func(r *rank) error { return r.team.Allreduce(bg, good(), good(), coll.Float32, coll.OpSum) })
	}
}

// TestVLayoutGapHoldsTheOtherBuffer: a v-layout's gaps are not the buffer's, so the
// other buffer may lie in them (review found the extent check refusing it).
func TestVLayoutGapHoldsTheOtherBuffer(t *testing.T) {
	w := newWorld(t, 2, coll.Config{Timeout: 5 * time.Second})
	bufs := make([][]byte, 2)
	w.mustRun(func(r *rank) error {
		b := make([]byte, 16)
		for i := range b {
			b[i] = byte(16*r.r + i)
		}
		bufs[r.r] = b
		// dst blocks at [0,4) and [8,12); src blocks at [4,8) and [12,16): the same
		// layout, 4 bytes on.
		return r.team.Run(context.Background(), coll.Args{Type: coll.Alltoallv, DType: coll.Uint8,
			Src: coll.BufferDesc{Slice: b[4:], Counts: []int{4, 4}, Displs: []int{0, 8}},
			Dst: coll.BufferDesc{Slice: b, Counts: []int{4, 4}, Displs: []int{0, 8}}})
	})
	for r, b := range bufs {
		for from := 0; from < 2; from++ {
			// Block r of rank from's src is at from's bytes 4+8r: it lands at 8·from.
			for i := 0; i < 4; i++ {
				require.Equal(t, byte(16*from+4+8*r+i), b[8*from+i], "rank %d, block from %d, byte %d", r, from, i)
			}
		}
	}
}

// TestBcastDstRefused: bcast has one buffer on every rank, Args.Src. A Dst is refused
// at Init naming it, both where a non-root passes only a Dst (the MPI habit of a
// receive buffer: before, every rank failed with a count mismatch, "count 0", that
// did not say which field was wrong) and where Dst sits beside Src (before, it was
// ignored and stayed as it was). The peers fail that collective at once, and the team
// goes on: a bcast through Src then moves fresh random bytes to every rank.
func TestBcastDstRefused(t *testing.T) {
	const n = 3
	w := newWorld(t, n, coll.Config{Timeout: 5 * time.Second})
	bg := context.Background()
	rnd := testutil.Rand(t)
	for _, besideSrc := range []bool{false, true} {
		errs := w.run(func(r *rank) error {
			buf := make([]byte, 16)
			a := coll.Args{Type: coll.Bcast, DType: coll.Uint8, Src: coll.BufferDesc{Slice: buf, Count: 16}}
			if r.r != 0 {
				a.Dst = coll.BufferDesc{Slice: make([]byte, 16), Count: 16}
				if !besideSrc {
					a.Src = coll.BufferDesc{}
				}
			}
			return r.team.Run(bg, a)
		})
		for r := 1; r < n; r++ {
			require.ErrorIs(t, errs[r], coll.ErrInvalid, "rank %d (Dst beside Src: %v)", r, besideSrc)
			require.ErrorContains(t, errs[r], "Args.Dst is set, but bcast has one buffer on every rank, Args.Src")
		}
		require.ErrorIs(t, errs[0], coll.ErrPeerFailed, "the root hears of the refusal")
	}
	want := make([]byte, 64)
	testutil.Fill(rnd, want)
	got := make([][]byte, n)
	w.mustRun(func(r *rank) error {
		got[r.r] = make([]byte, 64)
		if r.r == 0 {
			copy(got[0], want)
		}
		return r.team.Run(bg, coll.Args{Type: coll.Bcast, DType: coll.Uint8, Src: coll.BufferDesc{Slice: got[r.r], Count: 64}})
	})
	for r := range n {
		testutil.Equal(t, want, got[r], "bcast after the refusals")
	}
}

// TestBrokenAfterClose: Broken says nil while a team is usable and ErrClosed (not
// ErrTeamBroken) once this rank closed it; before, a closed team reported nil, as if
// usable.
func TestBrokenAfterClose(t *testing.T) {
	w := newWorld(t, 2, coll.Config{})
	w.mustRun(func(r *rank) error {
		if err := r.team.Broken(); err != nil {
			return err
		}
		return r.team.Close()
	})
	for _, r := range w.ranks {
		err := r.team.Broken()
		require.ErrorIs(t, err, coll.ErrClosed, "rank %d", r.r)
		require.NotErrorIs(t, err, coll.ErrTeamBroken, "rank %d", r.r)
	}
}

// TestLocalOOBNamesMissingRanks: a team whose rank never joins fails NewTeam on the
// others at their deadline with an error that names the rank waited for and wraps
// ErrTimeout (and context.DeadlineExceeded); before, it said only "context deadline
// exceeded".
func TestLocalOOBNamesMissingRanks(t *testing.T) {
	oobs := coll.LocalOOB(4)
	ctx, err := coll.NewContext(coll.Config{Device: device()})
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Close()) }()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ { // rank 3 never joins
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			tm, err := ctx.NewTeam(c, oobs[r])
			if err == nil {
				err = errors.Join(errors.New("NewTeam succeeded without rank 3"), tm.Close())
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.ErrorIs(t, err, coll.ErrTimeout, "rank %d", r)
		require.ErrorIs(t, err, context.DeadlineExceeded, "rank %d", r)
		require.ErrorContains(t, err, "waiting for rank 3", "rank %d", r)
	}
}
