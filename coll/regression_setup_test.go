package coll_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// failingOOB fails its rank's Allgather number failAt (counting from 1) after taking
// part in it, as a store client does whose connection broke after its value was set:
// the others' round completes.
type failingOOB struct {
	coll.Messenger
	failAt, calls int
}

func (f *failingOOB) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	f.calls++
	out, err := f.Messenger.Allgather(ctx, data)
	if f.calls == f.failAt {
		return nil, errors.New("injected OOB failure")
	}
	return out, err
}

// TestRegressionLastSetupRound (adversarial pass, item 6): when the OOB fails on one
// rank in the last setup round, only that rank's NewTeam fails, and the others, whose
// round completed, form a team with it. The failing rank now tells them over the links
// it had already connected, so their first collective fails at once with a PeerError
// naming it and its cause, not at their deadline.
func TestRegressionLastSetupRound(t *testing.T) {
	const n, bad = 3, 1
	oobs := coll.LocalOOB(n)
	oobs[bad] = &failingOOB{Messenger: oobs[bad].(coll.Messenger), failAt: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctxs := make([]*coll.Context, n)
	teams := make([]*coll.Team, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		c, err := coll.NewContext(coll.Config{Device: device(), Timeout: time.Minute})
		require.NoError(t, err)
		ctxs[r] = c
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			teams[r], errs[r] = c.NewTeam(ctx, oobs[r])
		}()
	}
	wg.Wait()
	require.Error(t, errs[bad], "the rank whose OOB failed")
	for r := 0; r < n; r++ {
		if r == bad {
			continue
		}
		if errs[r] != nil {
			require.ErrorIs(t, errs[r], coll.ErrPeerFailed, "rank %d", r)
			continue
		}
		defer teams[r].Close()
	}
	start := time.Now()
	for r := 0; r < n; r++ {
		if r == bad || errs[r] != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = teams[r].Barrier(ctx)
		}()
	}
	wg.Wait()
	for r := 0; r < n; r++ {
		if r == bad {
			continue
		}
		require.ErrorIs(t, errs[r], coll.ErrPeerFailed, "rank %d", r)
		require.False(t, errors.Is(errs[r], context.DeadlineExceeded), "rank %d waited out its deadline: %v", r, errs[r])
		var pe *coll.PeerError
		require.ErrorAs(t, errs[r], &pe)
		require.Equal(t, bad, pe.Rank, "rank %d: %v", r, errs[r])
		require.Contains(t, errs[r].Error(), "last setup round", "rank %d", r)
	}
	t.Logf("the others' first collective failed within %v: %v", time.Since(start).Round(time.Millisecond), errs[0])
}
