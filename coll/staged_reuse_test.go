package coll_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestStagedReuseOverlapping: two staged gathers of one shape open at once on every
// rank (the root's destinations in sim memory, so staged through host scratch),
// initialized, posted and closed again and again, closed in either order: each Init
// takes a stage kit, a scratch and (from the second round) a transport task that the
// last round's requests handed back, in whatever pairing the pools give, and no two
// open requests may share any of them. Every byte of both destinations is checked
// with fresh data in every round.
func TestStagedReuseOverlapping(t *testing.T) {
	const n, block, rounds = 4, 96 << 10, 6
	rnd := testutil.Rand(t)
	w := newWorld(t, n, coll.Config{Timeout: 30 * time.Second})
	defer w.close()
	var srcs [2][][]byte
	var dsts [2]*mem.Buffer
	for k := range 2 {
		srcs[k] = make([][]byte, n)
		for r := range n {
			srcs[k][r] = make([]byte, block)
		}
		d, err := mem.Alloc(mem.Sim, n*block)
		require.NoError(t, err)
		defer d.Close()
		dsts[k] = d
	}
	args := func(k, r int) coll.Args {
		a := coll.Args{Type: coll.Gather, DType: coll.Uint8, Src: coll.BufferDesc{Slice: srcs[k][r], Count: block}}
		if r == 0 {
			a.Dst = coll.BufferDesc{Buf: dsts[k], Type: mem.Sim, Count: n * block}
		}
		return a
	}
	for round := range rounds {
		for k := range 2 {
			for r := range n {
				testutil.Fill(rnd, srcs[k][r])
			}
		}
		w.mustRun(func(r *rank) error {
			var qs [2]*coll.Request
			for k := range 2 {
				q, err := r.team.Init(args(k, r.r))
				if err != nil {
					return err
				}
				qs[k] = q
			}
			for _, q := range qs {
				if err := q.Post(); err != nil {
					return err
				}
			}
			for _, q := range qs {
				if err := q.Wait(context.Background()); err != nil {
					return err
				}
			}
			if r.r == 0 && !qs[0].Staging().Dst.Staged {
				return fmt.Errorf("the root's sim destination is not staged")
			}
			first, second := qs[0], qs[1]
			if round%2 == 1 {
				first, second = second, first
			}
			if err := first.Close(); err != nil {
				return err
			}
			return second.Close()
		})
		for k := range 2 {
			got := readMem(t, dsts[k].Addr(), mem.Sim, n*block)
			for j := range n {
				testutil.Equal(t, srcs[k][j], got[j*block:(j+1)*block], fmt.Sprintf("round %d: gather %d, block %d", round, k, j))
			}
		}
	}
}
