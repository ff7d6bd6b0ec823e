package coll_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/tlmlx5"
)

// T9: a request still open when the sequence numbers wrap around the transport's
// window (tlmlx5.SeqWindow: what the wire carries of them) makes the colliding Init
// fail with ErrBusy, and the open request keeps its routing: it still runs.
func TestRegressionSeq16Wrap(t *testing.T)     { seq16(t, 0) }
func TestRegressionSeq16WrapBusy(t *testing.T) { seq16(t, 1) }

func seq16(t *testing.T, first int) {
	// The re-post's messages leave behind what the SeqWindow closes queued (their
	// aborts and acks): about 1 s under -race beside other work, but a full make test
	// on 2 loaded cores once took over 5 s. The deadline is for a lost message, not
	// for speed.
	w := newWorld(t, 2, coll.Config{Timeout: 30 * time.Second})
	reqs := make([]*coll.Request, 2)
	bufs := make([][2][]byte, 2)
	w.mustRun(func(r *rank) error {
		bufs[r.r] = [2][]byte{make([]byte, 8), make([]byte, 8)}
		a := coll.Args{Type: coll.Allreduce, DType: coll.Uint8, Op: coll.OpSum, Flags: coll.Persistent,
			Src: coll.BufferDesc{Slice: bufs[r.r][0], Count: 8}, Dst: coll.BufferDesc{Slice: bufs[r.r][1], Count: 8}}
		for i := 0; i < first; i++ {
			q, _ := r.team.Init(coll.Args{Type: coll.Barrier})
			_ = q.Close()
		}
		q, err := r.team.Init(a)
		if err != nil {
			return err
		}
		reqs[r.r] = q
		if err := q.Post(); err != nil {
			return err
		}
		return q.Wait(context.Background())
	})
	// SeqWindow-1 local Init/Close pairs (no communication).
	w.mustRun(func(r *rank) error {
		for i := 1 + first; i < tlmlx5.SeqWindow+first; i++ {
			q, err := r.team.Init(coll.Args{Type: coll.Barrier})
			if err != nil {
				return err
			}
			if err := q.Close(); err != nil {
				return err
			}
		}
		q, err := r.team.Init(coll.Args{Type: coll.Barrier})
		if q != nil {
			_ = q.Close()
		}
		if !errors.Is(err, coll.ErrBusy) {
			t.Errorf("rank %d: Init #%d: %v, want ErrBusy", r.r, tlmlx5.SeqWindow, err)
		}
		return nil
	})
	start := time.Now()
	errs := w.run(func(r *rank) error {
		for i := range bufs[r.r][0] {
			bufs[r.r][0][i] = byte(r.r + 1)
		}
		q := reqs[r.r]
		if err := q.Post(); err != nil {
			return err
		}
		err := q.Wait(context.Background())
		_ = q.Close()
		return err
	})
	t.Logf("re-post of #0 after the rejected Init: %v in %v", errs, time.Since(start))
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}
