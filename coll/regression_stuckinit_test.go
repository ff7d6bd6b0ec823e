package coll_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
)

// TestFailedInitIntoStaysOpen: an InitInto that fails after it built a staging
// scratch, and whose release of it fails too (a deregistration), leaves q open, as its
// doc says: the team's Close refuses with ErrBusy while it is (before, the team closed
// under it and freed what it still held), q's Close retries the release and lets the
// caller's Buffer go, and then the team closes. (Found by a review.)
func TestFailedInitIntoStaysOpen(t *testing.T) {
	ctx, err := coll.NewContext(coll.Config{Device: device(), ScratchCache: -1})
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Close()) }()
	tm, err := ctx.NewTeam(context.Background(), coll.LocalOOB(1)[0])
	require.NoError(t, err)
	src, err := mem.Alloc(mem.Sim, 64) // staged: its scratch is registered
	require.NoError(t, err)
	restore, fired := coll.FailNextScratchDereg()
	defer restore()
	q := new(coll.Request)
	err = tm.InitInto(q, coll.Args{Type: coll.Allgather, DType: coll.Uint8, Alg: "nosuchalg",
		Src: coll.BufferDesc{Buf: src, Count: 64}, Dst: coll.BufferDesc{Slice: make([]byte, 64), Count: 64}})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.True(t, fired(), "the failed InitInto's release failed too, or this tests nothing")
	require.ErrorIs(t, tm.InitInto(q, coll.Args{Type: coll.Barrier}), coll.ErrBusy, "q stays open")
	require.ErrorIs(t, tm.Close(), coll.ErrBusy, "the team closed under an open request")
	require.NoError(t, q.Close(), "its Close retries the release")
	require.NoError(t, src.Close(), "q's Close let the Buffer go")
	require.NoError(t, tm.Close())
}
