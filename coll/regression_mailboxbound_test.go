package coll_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestMailboxRefusalCarriesBound: a LocalOOB mailbox closed with its rank's bound
// (CloseLeaving) refuses with a *LeftError carrying it; closed without one, it refuses
// with a plain error. Both wrap ErrClosed.
func TestMailboxRefusalCarriesBound(t *testing.T) {
	oobs := coll.LocalOOB(3)
	boxes := make([]coll.Mailbox, 3)
	for i, o := range oobs {
		b, err := o.(coll.Messenger).Mailbox()
		require.NoError(t, err)
		boxes[i] = b
	}
	lc, ok := boxes[1].(coll.LeavingCloser)
	require.True(t, ok, "LocalOOB's mailbox takes the bound")
	require.NoError(t, boxes[0].Send(1, []byte("before")))
	require.NoError(t, boxes[0].Gone(1))
	lc.CloseLeaving(17, "rank 1 closed its team")
	for _, err := range []error{boxes[0].Send(1, []byte("after")), boxes[0].Gone(1), boxes[2].Gone(1)} {
		require.ErrorIs(t, err, coll.ErrClosed)
		var le *coll.LeftError
		require.True(t, errors.As(err, &le), "%v", err)
		require.Equal(t, 1, le.Rank)
		require.Equal(t, uint64(17), le.From)
		require.Contains(t, err.Error(), "collective #17")
	}
	// A message the closing box drops unread gets its sender the box's news (an empty
	// delivery), so that a hello left unanswered is asked about at once: rank 1 dropped
	// "before", rank 2 drops "hello".
	news := make(chan int, 4)
	boxes[0].Listen(func(from int, msg []byte) {
		if len(msg) == 0 {
			news <- from
		}
	})
	require.NoError(t, boxes[0].Send(2, []byte("hello")))
	boxes[2].Close("rank 2's NewTeam failed")
	for _, want := range []int{1, 2} {
		select {
		case from := <-news:
			require.Equal(t, want, from)
		case <-time.After(10 * time.Second):
			t.Fatalf("no news of rank %d's box, which dropped rank 0's message", want)
		}
	}
	err := boxes[0].Send(2, []byte("x"))
	require.ErrorIs(t, err, coll.ErrClosed)
	var le *coll.LeftError
	require.False(t, errors.As(err, &le), "no bound was given: %v", err)
	boxes[0].Close("done")
}

// TestMailboxRefusalSparesDoneCollectives: a rank that did its part of a collective and
// closed its team at once (the soak's eager close) must not fail that collective on a
// peer that still has it to do, when the peer learns of the close from its mailbox
// refusing a message (a hello for a link, tlmlx5's check of a link being made) rather
// than from the closer's own left message, which goes only to the ranks it is linked
// to. Until session 36 the refusal carried no bound, counted as "gone from collective
// 0", and failed every collective in flight: the 45-minute soak of session 35 saw a
// scatter and a gather fail on two ranks of six while the other four, the closer
// included, succeeded.
func TestMailboxRefusalSparesDoneCollectives(t *testing.T) {
	const n, blk = 3, 40
	w := newWorld(t, n, coll.Config{Timeout: 20 * time.Second})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 36))
	srcs := make([][]byte, n)
	for i := range srcs {
		srcs[i] = make([]byte, blk)
		for j := range srcs[i] {
			srcs[i][j] = byte(rng.Uint32())
		}
	}
	dst := make([]byte, n*blk)
	// A persistent linear gather to rank 0: ranks 1 and 2 never link to each other, so
	// rank 2's left message does not reach rank 1. Its second post has no signature
	// check, so rank 2's post ends with its own part.
	reqs := make([]*coll.Request, n)
	w.mustRun(func(r *rank) error {
		a := coll.Args{Type: coll.Gather, Root: 0, DType: coll.Uint8, Flags: coll.Persistent, Alg: "linear",
			Src: coll.BufferDesc{Slice: srcs[r.r], Count: blk}}
		if r.r == 0 {
			a.Dst = coll.BufferDesc{Slice: dst, Count: n * blk}
		}
		req, err := r.team.Init(a)
		if err != nil {
			return err
		}
		reqs[r.r] = req
		if err := req.Post(); err != nil {
			return err
		}
		return req.Wait(context.Background())
	})
	clear(dst)
	closed := make(chan uint64, 1) // rank 2's next collective, once its team closed
	var gone error                 // what rank 1's Messenger learnt of rank 2
	errs := w.run(func(r *rank) error {
		req := reqs[r.r]
		switch r.r {
		case 1:
			// Late: rank 2 has done its part of the second post and closed, and rank
			// 1's transport finds its mailbox closed first.
			next, ok := <-closed
			if !ok {
				return errors.New("rank 2 failed its gather")
			}
			gone = coll.MailboxGone(r.team, 2)
			var le *coll.LeftError
			if !errors.As(gone, &le) || le.From != next {
				return fmt.Errorf("rank 2's closed mailbox said %v, want its bound %d", gone, next)
			}
		case 2:
			err := req.Post()
			if err == nil {
				err = req.Wait(context.Background())
			}
			if err == nil {
				err = req.Close()
			}
			if err != nil {
				close(closed)
				return fmt.Errorf("rank 2's gather: %w", err)
			}
			next := coll.NextSeq(r.team)
			err = r.team.Close()
			closed <- next
			return err
		}
		if err := req.Post(); err != nil {
			return err
		}
		err := req.Wait(context.Background())
		if cerr := req.Close(); err == nil {
			err = cerr
		}
		return err
	})
	for i, err := range errs {
		require.NoError(t, err, "rank %d (rank 1's Messenger learnt: %v)", i, gone)
	}
	for i := range n {
		require.Equal(t, srcs[i], dst[i*blk:(i+1)*blk], "rank %d's block at the root", i)
	}
	// The next collective, which rank 2 takes no part in, fails at once on the others,
	// naming it.
	errs = w.run(func(r *rank) error {
		if r.r == 2 {
			return nil
		}
		return r.team.Barrier(context.Background())
	})
	for _, i := range []int{0, 1} {
		var pe *coll.PeerError
		require.True(t, errors.As(errs[i], &pe), "rank %d: %v", i, errs[i])
		require.Equal(t, 2, pe.Rank, "rank %d", i)
	}
}
