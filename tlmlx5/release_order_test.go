package tlmlx5

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestUnkeepableStaysUnkeepable: a task that was not keepable at its Close (a
// scratch in quarantine) and whose release failed part-way is not cached by the
// retried Close, which found it keepable once the quarantined buffer was gone from its
// list: the next collective of the shape got a half-released task.
func TestUnkeepableStaysUnkeepable(t *testing.T) {
	ctx, soft, ep := faultyEndpoint(t, 2, 100)
	tm := ep.(*team)
	cs := plainCase(collective.Allreduce, "rd", 2, 0, 3000, collective.Int32, collective.OpSum)
	runs := cs.build(t, 1)
	runs[0].spec.Persistent = false
	kd, err := ep.NewTask(&runs[0].spec)
	require.NoError(t, err)
	k := kd.(*task)
	require.True(t, k.cacheKey)
	n0 := scratchBufs(k)
	require.NotZero(t, n0)
	// quarantine the first scratch as Close would after a failed post
	var q *lbuf
	for _, b := range k.bufs {
		if b.own != nil && b.reg != nil {
			q = b
			break
		}
	}
	k.keep(q, aheadWrite{peer: 1, tag: 0, post: 1})
	// an extra scratch, released first (reverse order): its deregistration fails
	_, err = k.newScratch(8192, false, receiveAccess)
	require.NoError(t, err)
	require.False(t, k.keepable())
	require.NoError(t, soft.FailNth(verbs.FaultDeregMR, 1))
	require.Error(t, k.Close())
	require.False(t, k.keepable())
	require.NoError(t, k.Close(), "the retry")
	require.False(t, slices.Contains(tm.cached, k), "a half-released task was cached")
	spec := runs[0].spec
	spec.Seq = 200
	kd2, err := ep.NewTask(&spec)
	require.NoError(t, err)
	k2 := kd2.(*task)
	freed := 0
	for i := range k2.ops {
		if b := k2.ops[i].out.b; b != nil && b.own == nil && b.dm == nil && (b.kept || b.reg == nil) && b.host != nil && b != k2.dst && b != k2.src {
			freed++
		}
	}
	require.False(t, k2 == k && freed > 0, "a half-released task was handed out again")
	require.NoError(t, k2.Close())
	require.NoError(t, ep.Close())
	require.NoError(t, ctx.Close())
}

// TestIdleEvictionFailureNotTheReleasersOwn: releasing a kept registration evicts the
// oldest idle one; that eviction's failed deregistration is not the released entry's
// failure (the task used to keep its buffer and release the reference again on a
// retry, taking another task's). The evicted entry stays for the cache's close.
func TestIdleEvictionFailureNotTheReleasersOwn(t *testing.T) {
	const n = 2
	ctx, soft, ep := faultyEndpoint(t, n, 1000)
	tm := ep.(*team)
	cs := plainCase(collective.Allreduce, "rd", n, 0, 3000, collective.Int32, collective.OpSum)
	seq := uint64(1)
	for len(tm.cache.idle) < maxIdleRegs {
		runs := cs.build(t, seq)
		seq++
		kd, err := ep.NewTask(&runs[0].spec)
		require.NoError(t, err)
		require.NoError(t, kd.Close())
	}
	oldest := tm.cache.idle[0]
	runs := cs.build(t, seq)
	kd, err := ep.NewTask(&runs[0].spec)
	require.NoError(t, err)
	a := kd.(*task)
	s := 0
	for _, b := range a.bufs {
		if b.own != nil {
			s++
		}
	}
	require.NoError(t, soft.FailNth(verbs.FaultDeregMR, s+1)) // the idle eviction at a user buffer's release
	require.NoError(t, a.Close())
	require.Empty(t, a.bufs)
	require.False(t, slices.Contains(tm.cache.idle, oldest), "the oldest idle entry was evicted")
	require.Contains(t, tm.cache.entries, oldest.key, "its deregistration failed: it stays for close")
	require.Zero(t, oldest.refs)
	require.NoError(t, ep.Close())
	require.NoError(t, ctx.Close())
}

// TestFailedBuildReleasedAtTeardown: what the release of a task whose build failed
// could not release waits in the team's unreleased list, and the team's Close releases
// it (it was lost, and the team could never close).
func TestFailedBuildReleasedAtTeardown(t *testing.T) {
	ctx := openSoft(t)
	soft, err := verbs.SoftControl(ctx.(*context).dev)
	require.NoError(t, err)
	fs := fault.NewSet([]fault.Fault{{Kind: fault.Reg, Rank: 2, N: 4}}, 2)
	ep, _, err := ctx.NewEndpoint(driver.TeamParams{Rank: 2, Size: 4, Faults: fs, NextSeq: func() uint64 { return 1 }})
	require.NoError(t, err)
	cs := plainCase(collective.Allreduce, "rd", 4, 0, 2001, collective.Int32, collective.OpSum)
	runs := cs.build(t, 1)
	require.NoError(t, soft.FailNth(verbs.FaultDeregMR, 1))
	_, err = ep.NewTask(&runs[2].spec)
	require.ErrorIs(t, err, verbs.ErrInjected, "the deregistration failed in the build's release")
	require.Len(t, ep.(*team).unreleased, 1)
	require.NoError(t, ep.Close())
	require.NoError(t, ctx.Close())
}
