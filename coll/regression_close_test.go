package coll_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// A rank that closes a request without posting it tells its peers, which
// then fail at once instead of waiting out their deadline; the team stays
// usable.
func TestRegressionCloseUnposted(t *testing.T) {
	for _, persistent := range []bool{false, true} {
		w := newWorld(t, 3, coll.Config{Timeout: 20 * time.Second})
		flags := coll.Flags(0)
		if persistent {
			flags = coll.Persistent
		}
		start := time.Now()
		errs := w.run(func(r *rank) error {
			a := coll.Args{Type: coll.Allreduce, DType: coll.Uint8, Op: coll.OpSum, Flags: flags,
				Src: coll.BufferDesc{Slice: make([]byte, 8), Count: 8}, Dst: coll.BufferDesc{Slice: make([]byte, 8), Count: 8}}
			q, err := r.team.Init(a)
			if err != nil {
				return err
			}
			if persistent { // one good post first
				if err := q.Post(); err != nil {
					return err
				}
				if err := q.Wait(context.Background()); err != nil {
					return err
				}
			}
			if r.r == 1 {
				return q.Close()
			}
			err = q.Post()
			if werr := q.Wait(context.Background()); err == nil {
				err = werr
			}
			if cerr := q.Close(); err == nil {
				err = cerr
			}
			return err
		})
		took := time.Since(start)
		t.Logf("persistent=%v: %v in %v", persistent, errs, took)
		require.NoError(t, errs[1])
		for _, r := range []int{0, 2} {
			require.True(t, errors.Is(errs[r], coll.ErrPeerFailed), "persistent=%v rank %d: %v", persistent, r, errs[r])
		}
		require.Less(t, took, 5*time.Second, "peers learned at once, not at their deadline")
		// The team still works.
		w.mustRun(func(r *rank) error { return r.team.Barrier(context.Background()) })
		w.close()
	}
}
