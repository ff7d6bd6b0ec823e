package coll_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// Context.Config hands out copies of Algs and Faults: an edit of the result (the way a
// caller derives a second context's Config) neither changes what the context's teams
// run nor races with their Inits, which read the context's own.
func TestContextConfigIsACopy(t *testing.T) {
	never, err := coll.ParseFault("alloc@7") // a rank this team lacks: never fires
	require.NoError(t, err)
	w := newWorld(t, 2, coll.Config{
		Timeout: 10 * time.Second,
		Algs:    map[coll.CollType]string{coll.Allgather: "ring"},
		Faults:  []coll.Fault{never},
	})
	c0 := w.ranks[0].ctx

	cfg := c0.Config()
	cfg.Algs[coll.Allgather] = "no-such-alg"
	cfg.Faults[0].Rank = 0
	require.Equal(t, "ring", c0.Config().Algs[coll.Allgather], "the context's Algs changed through Config's result")
	require.Equal(t, 7, c0.Config().Faults[0].Rank, "the context's Faults changed through Config's result")

	// TLs too, also the caller's own slice given to NewContext.
	tls := []string{"mlx5"}
	c, err := coll.NewContext(coll.Config{Device: device(), TLs: tls})
	require.NoError(t, err)
	defer c.Close()
	tls[0] = "edited"
	require.Equal(t, []string{"mlx5"}, c.Config().TLs, "the context kept the caller's TLs slice")
	got := c.Config()
	got.TLs[0] = "edited"
	require.Equal(t, []string{"mlx5"}, c.Config().TLs, "the context's TLs changed through Config's result")

	// While every rank runs allgathers, another goroutine keeps deriving configs from
	// rank 0's context and editing them (under -race, a shared map is a reported race).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			d := c0.Config()
			d.Algs[coll.Allgather] = "no-such-alg"
			d.Faults[0].Rank = 0
		}
	}()
	algs := make([]string, len(w.ranks))
	w.mustRun(func(r *rank) error {
		src, dst := make([]byte, 64), make([]byte, 128)
		for range 30 {
			q, err := r.team.Init(coll.Args{Type: coll.Allgather, DType: coll.Uint8,
				Src: coll.BufferDesc{Slice: src, Count: 64}, Dst: coll.BufferDesc{Slice: dst, Count: 128}})
			if err != nil {
				return err
			}
			algs[r.r] = q.Alg()
			err = q.Post()
			if err == nil {
				err = q.Wait(context.Background())
			}
			if cerr := q.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	require.Equal(t, []string{"ring", "ring"}, algs)
}
