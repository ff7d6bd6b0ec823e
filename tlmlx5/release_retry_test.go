package tlmlx5

// Releases that fail part-way (soft0's FaultDeregMR: a failed ibv_dereg_mr) leave
// what they could not release with its owner, for a retry or the teardown: nothing is
// lost, freed under a live registration, or handed out twice. Until session 42 each of
// these leaked or worse.

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/verbs"
)

func scratchBufs(k *task) (n int) {
	for _, b := range k.bufs {
		if b.own != nil && b.reg != nil {
			n++
		}
	}
	return n
}

// faultyEndpoint opens a soft0 context, its fault control, and rank 0's endpoint of a
// team of size, whose sequence numbers start at seq.
func faultyEndpoint(t *testing.T, size int, seq uint64) (driver.Context, *verbs.Soft, driver.Endpoint) {
	t.Helper()
	ctx := openSoft(t)
	soft, err := verbs.SoftControl(ctx.(*context).dev)
	require.NoError(t, err)
	ep, _, err := ctx.NewEndpoint(driver.TeamParams{Rank: 0, Size: size, NextSeq: func() uint64 { return seq }})
	require.NoError(t, err)
	return ctx, soft, ep
}

// TestTaskReleaseRetried: a task's Close whose deregistration fails keeps the buffer,
// and the retried Close releases it; the team and the context then close. (The
// release used to forget the buffer: the retry "succeeded", the registration stayed in
// use for ever, and neither the team nor the context could close.)
func TestTaskReleaseRetried(t *testing.T) {
	const n = 2
	ctx, soft, ep := faultyEndpoint(t, n, 2)
	cs := plainCase(collective.Allreduce, "rd", n, 0, 3000, collective.Int32, collective.OpSum)
	runs := cs.build(t, 1) // persistent: never kept in the task cache
	kd, err := ep.NewTask(&runs[0].spec)
	require.NoError(t, err)
	k := kd.(*task)
	require.NotZero(t, scratchBufs(k), "the case needs transport scratch")

	require.NoError(t, soft.FailNth(verbs.FaultDeregMR, 1))
	require.Error(t, k.Close(), "the injected deregistration failure")
	require.NotZero(t, scratchBufs(k), "the failed release kept nothing to retry")
	require.NoError(t, k.Close(), "the retried Close")
	require.Empty(t, k.bufs)
	require.NoError(t, ep.Close(), "the endpoint closes once the retried task Close released its scratch")
	require.NoError(t, ctx.Close())
}

// TestEvictionFailureNotTheClosersOwn: a Close that caches its task and evicts the
// oldest, whose release fails, succeeds: the evicted task's failure is not its own, so
// coll never retries the Close into caching the task twice (two later collectives of
// that shape took one task). The evicted task waits in the team's unreleased list,
// and the teardown releases it.
func TestEvictionFailureNotTheClosersOwn(t *testing.T) {
	const n = 2
	ctx, soft, ep := faultyEndpoint(t, n, 100)
	tm := ep.(*team)
	cs := plainCase(collective.Allreduce, "rd", n, 0, 3000, collective.Int32, collective.OpSum)
	var last *task
	var runs []*rankRun
	for i := 0; i <= maxCachedTasks; i++ {
		runs = cs.build(t, uint64(i+1))
		runs[0].spec.Persistent = false
		kd, err := ep.NewTask(&runs[0].spec)
		require.NoError(t, err)
		last = kd.(*task)
		if i == maxCachedTasks {
			require.NoError(t, soft.FailNth(verbs.FaultDeregMR, 1)) // the evicted task's scratch
		}
		require.NoError(t, last.Close())
	}
	require.Len(t, tm.unreleased, 1, "the evicted task, whose release failed")
	require.NotSame(t, last, tm.unreleased[0])
	require.Equal(t, 1, countOf(tm.cached, last))
	// Two open collectives of the same shape (seq 200 and 201).
	a, b := runs[0].spec, runs[0].spec
	a.Seq, b.Seq = 200, 201
	ka, err := ep.NewTask(&a)
	require.NoError(t, err)
	kb, err := ep.NewTask(&b)
	require.NoError(t, err)
	require.NotSame(t, ka, kb, "two open collectives share one task")
	require.NoError(t, ka.Close())
	require.NoError(t, kb.Close())
	require.NoError(t, ep.Close(), "the teardown releases the evicted task")
	require.Empty(t, tm.unreleased)
	require.NoError(t, ctx.Close())
}

func countOf(ks []*task, k *task) int {
	n := 0
	for _, x := range ks {
		if x == k {
			n++
		}
	}
	return n
}

// TestSetupFaultsLeaveNothing: every soft0 failure in a mesh endpoint's setup
// (NewEndpoint's CQs and QPs, Connect's control blocks, send slots and eager rings)
// leaves nothing once the endpoints and the context close.
func TestSetupFaultsLeaveNothing(t *testing.T) {
	const n = 4
	require.Empty(t, verbs.LiveObjects(), "objects of another test are open")
	for _, kind := range []verbs.FaultKind{verbs.FaultCreateCQ, verbs.FaultCreateQP, verbs.FaultRegMR} {
		for nth := 1; nth <= 12; nth++ {
			ctx := openSoft(t)
			soft, err := verbs.SoftControl(ctx.(*context).dev)
			require.NoError(t, err)
			require.NoError(t, soft.FailNth(kind, nth))
			var eps []driver.Endpoint
			addrs := make([][]byte, n)
			var setupErr error
			for r := 0; r < n && setupErr == nil; r++ {
				ep, addr, err := ctx.NewEndpoint(driver.TeamParams{Rank: r, Size: n, NextSeq: func() uint64 { return 1 }})
				if err != nil {
					setupErr = err
					break
				}
				eps = append(eps, ep)
				addrs[r] = addr
			}
			if setupErr == nil {
				for _, ep := range eps {
					if err := ep.Connect(addrs); err != nil {
						setupErr = err
					}
				}
			}
			for _, ep := range eps {
				require.NoError(t, ep.Close(), "%v #%d", kind, nth)
			}
			require.NoError(t, ctx.Close(), "%v #%d", kind, nth)
			require.Empty(t, verbs.LiveObjects(), "%v #%d (setup: %v)", kind, nth, setupErr)
		}
	}
}

// TestDropScratchKeepsRegistered: dropScratch (doubleOutput's undo) whose
// deregistration fails keeps the memory, still registered, with the task, whose
// release frees both. (It used to free memory under a live registration.)
func TestDropScratchKeepsRegistered(t *testing.T) {
	ctx, soft, ep := faultyEndpoint(t, 2, 1)
	k := &task{t: ep.(*team)}
	lb, err := k.newScratch(8192, false, receiveAccess)
	require.NoError(t, err)
	require.NoError(t, soft.FailNth(verbs.FaultDeregMR, 1))
	require.Error(t, k.dropScratch(lb))
	mrLive := verbs.LiveObjects()["mr"]
	t.Logf("after the failed dropScratch: buffer addr %#x (0: freed), live MRs %d, regcache entries %d", lb.own.Addr(), mrLive, len(ep.(*team).cache.entries))
	require.NotZero(t, lb.own.Addr(), "memory freed while its MR is still registered")
	require.NoError(t, k.release())
	require.NoError(t, ep.Close())
	require.NoError(t, ctx.Close())
}
