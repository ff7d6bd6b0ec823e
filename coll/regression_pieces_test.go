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

// TestRegressionPiecesBehindWaiter: a staged gatherv root copies its own block a piece
// per poll (tlmlx5's copies in pieces), while another goroutine of the same rank is
// asleep in the transport's wait, on a barrier that rank 1 joins only after the
// gatherv. Rank 1's small block is eager and landed before the root posted, so no
// completion comes to wake the sleeper: before coll woke it for the transport's local
// work, the root's post stalled until its deadline with a few pieces copied (a
// reviewer's reproducer; 3 runs in 3).
func TestRegressionPiecesBehindWaiter(t *testing.T) {
	rnd := testutil.Rand(t)
	w := newWorld(t, 2, coll.Config{Timeout: 20 * time.Second})
	defer w.close()
	const big, small = 4 << 20, 64
	dst, err := mem.Alloc(mem.Sim, big+small)
	require.NoError(t, err)
	defer dst.Close()
	srcs := [][]byte{make([]byte, big), make([]byte, small)}
	reqs := make([]*coll.Request, 2)
	w.mustRun(func(r *rank) error {
		a := coll.Args{Type: coll.Gatherv, Root: 0, DType: coll.Uint8, Flags: coll.Persistent,
			Src: coll.BufferDesc{Slice: srcs[r.r], Count: len(srcs[r.r])}}
		if r.r == 0 {
			a.Dst = coll.BufferDesc{Addr: dst.Addr(), Type: mem.Sim, Counts: []int{big, small}, Displs: []int{0, big}}
		}
		q, err := r.team.Init(a)
		reqs[r.r] = q
		return err
	})
	defer closeReqs(reqs)
	for p := 1; p <= 3; p++ {
		for _, s := range srcs {
			testutil.Fill(rnd, s)
		}
		gathered := make(chan struct{})
		errs := make(chan error, 2)
		go func() {
			if err := reqs[1].Post(); err != nil {
				errs <- err
				return
			}
			if err := reqs[1].Wait(context.Background()); err != nil {
				errs <- err
				return
			}
			<-gathered
			errs <- w.ranks[1].team.Barrier(context.Background())
		}()
		go func() { errs <- w.ranks[0].team.Barrier(context.Background()) }()
		time.Sleep(100 * time.Millisecond) // rank 1's block has landed; rank 0's barrier sleeps
		require.NoError(t, reqs[0].Post())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		werr := reqs[0].Wait(ctx)
		cancel()
		close(gathered)
		require.NoError(t, werr, "post %d: the root's copy in pieces stalled behind the sleeping barrier", p)
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		got := readMem(t, dst.Addr(), mem.Sim, big+small)
		testutil.Equal(t, append(append([]byte(nil), srcs[0]...), srcs[1]...), got, fmt.Sprintf("post %d: the gathered data", p))
	}
	require.NoError(t, reqs[0].Close())
	require.NoError(t, reqs[1].Close())
}
