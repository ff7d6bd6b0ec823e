package coll_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// diesOOB is an OOB whose peer watch the test fires by hand (died).
type diesOOB struct {
	coll.OOB
	mu sync.Mutex
	fn func(int, string)
}

func (h *diesOOB) WatchPeers(ctx context.Context, died func(int, string)) (func(), error) {
	h.mu.Lock()
	h.fn = died
	h.mu.Unlock()
	return func() {}, nil
}

func (h *diesOOB) Mailbox() (coll.Mailbox, error) { return h.OOB.(coll.Messenger).Mailbox() }

func (h *diesOOB) died(r int, cause string) {
	h.mu.Lock()
	fn := h.fn
	h.mu.Unlock()
	fn(r, cause)
}

// TestWaitAfterRefusedPost: a team that breaks between Init and Post (a peer's death,
// told by the launcher's watch) refuses the Post, naming the break; the Wait that
// follows, as the package's usage example has it, returns the break too, not a
// misuse of the caller's (it said "never posted", ErrInvalid: found by a review, and
// Team.Run, which waited after such a refusal, returned that instead of the break).
func TestWaitAfterRefusedPost(t *testing.T) {
	oobs := coll.LocalOOB(2)
	hook := &diesOOB{OOB: oobs[0]}
	w := newWorldOOB(t, coll.Config{Timeout: 5 * time.Second}, []coll.OOB{hook, oobs[1]})
	defer w.close()
	tm := w.ranks[0].team
	q, err := tm.Init(coll.Args{Type: coll.Barrier})
	require.NoError(t, err)
	hook.died(1, "test: rank 1's process died")
	perr := q.Post()
	require.ErrorIs(t, perr, coll.ErrTeamBroken)
	werr := q.Wait(context.Background())
	require.ErrorIs(t, werr, coll.ErrTeamBroken)
	require.NotErrorIs(t, werr, coll.ErrInvalid)
	require.ErrorContains(t, werr, "rank 1's process died")
	require.NoError(t, q.Close())

	// A request that was never posted on a team that is fine is still the caller's
	// misuse.
	one := newWorld(t, 1, coll.Config{})
	defer one.close()
	q, err = one.ranks[0].team.Init(coll.Args{Type: coll.Barrier})
	require.NoError(t, err)
	require.ErrorIs(t, q.Wait(context.Background()), coll.ErrInvalid)
	require.NoError(t, q.Close())
}
