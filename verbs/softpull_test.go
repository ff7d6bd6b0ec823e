package verbs_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// pullTries bounds the tries of a write that the owner may make.
const pullTries = 50

// pollUntil polls cq until it has n completions or the deadline passes; it may run on
// any goroutine (it reports instead of failing the test).
func pollUntil(cq *verbs.CQ, n int, started chan<- struct{}) ([]verbs.WC, error) {
	buf := make([]verbs.WC, 4)
	var out []verbs.WC
	deadline := time.Now().Add(30 * time.Second)
	if started != nil {
		close(started)
	}
	for len(out) < n {
		k, err := cq.Poll(buf)
		if err != nil {
			return out, err
		}
		out = append(out, buf[:k]...)
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%d of %d completions after 30 s", len(out), n)
		}
	}
	return out, nil
}

// TestSoftPulls: soft0's writes with immediate of 32-256 KiB into memory registered
// with HintOwnerReads are copied by the owner when it polls its receive CQ meanwhile
// (Soft.Pulled counts them), and by the writer otherwise, after a wait (non-temporal,
// Soft.Streamed); other sizes and plain memory always by the writer, and so is every
// write of a chain (a message's landing pieces, posted at once). Either way the bytes,
// the immediate and the length arrive, and exactly one of the two ways made each
// write.
func TestSoftPulls(t *testing.T) {
	// Long enough that a polling owner gets the CPU in time on a loaded machine
	// (with the default 10 µs it took up to 285 tries under -race beside other
	// packages' tests).
	prev := verbs.SetPullWait(20 * time.Millisecond)
	t.Cleanup(func() { verbs.SetPullWait(prev) })
	a, b := softEnd(t, verbs.Options{}), softEnd(t, verbs.Options{})
	require.NoError(t, a.qp.Connect(roundTrip(t, b.qp.Info())))
	require.NoError(t, b.qp.Connect(roundTrip(t, a.qp.Info())))
	ctl, err := verbs.SoftControl(b.ctx)
	require.NoError(t, err)
	const size = 256<<10 + 1
	src := newBuffer(t, a.pd, size, rw)
	hinted := newBuffer(t, b.pd, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.HintOwnerReads)
	plain := newBuffer(t, b.pd, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	r := testutil.Rand(t)
	write := func(i int, dst *buffer, n int, poll bool) (pulled, streamed int64) {
		testutil.Fill(r, src.b)
		testutil.Fill(r, dst.b)
		p0, err := ctl.Pulled(dst.mr)
		require.NoError(t, err)
		s0, err := ctl.Streamed(dst.mr)
		require.NoError(t, err)
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
		var wg sync.WaitGroup
		var rwcs []verbs.WC
		var rerr error
		if poll {
			started := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				rwcs, rerr = pollUntil(b.cq, 1, started)
			}()
			<-started
		}
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Op: verbs.OpRDMAWriteWithImm, SGE: []verbs.SGE{src.sge(0, n)},
			Signaled: true, RemoteAddr: dst.addr(0), RKey: dst.mr.RKey(), Imm: uint32(i) + 7}))
		waitOK(t, a.cq, 1)
		if poll {
			wg.Wait()
			require.NoError(t, rerr)
		} else {
			rwcs = waitOK(t, b.cq, 1)
		}
		what := fmt.Sprintf("write %d: %d bytes, owner polling %v", i, n, poll)
		require.Len(t, rwcs, 1, what)
		require.NoError(t, rwcs[0].Err(), what)
		require.Equal(t, verbs.WCRecvRDMAWithImm, rwcs[0].Op, what)
		require.True(t, rwcs[0].HasImm, what)
		require.Equal(t, uint32(i)+7, rwcs[0].Imm, what)
		require.Equal(t, uint32(n), rwcs[0].Bytes, what)
		testutil.Equal(t, src.b[:n], dst.b[:n], what)
		p1, err := ctl.Pulled(dst.mr)
		require.NoError(t, err)
		s1, err := ctl.Streamed(dst.mr)
		require.NoError(t, err)
		return p1 - p0, s1 - s0
	}
	i := 0
	for _, c := range []struct {
		dst      *buffer
		n        int
		pullable bool
	}{
		{hinted, 32<<10 - 1, false}, {hinted, 32 << 10, true}, {hinted, 100003, true}, {hinted, 256 << 10, true},
		{hinted, 256<<10 + 1, false}, {plain, 64 << 10, false},
	} {
		// A poller that the scheduler holds back past the wait leaves a write to
		// its writer (under -race beside other packages' tests, often): the owner
		// must have made one of up to pullTries.
		owner, tries := false, 0
		for try := 0; try < pullTries && !owner; try++ {
			tries++
			pulled, streamed := write(i, c.dst, c.n, true)
			i++
			what := fmt.Sprintf("%d bytes (try %d)", c.n, try)
			switch {
			case !c.pullable:
				require.Zero(t, pulled, what)
				owner = true
			case pulled != 0:
				require.Equal(t, int64(c.n), pulled, what)
				require.Zero(t, streamed, what)
				owner = true
			default:
				require.Equal(t, int64(c.n), streamed, what+": the writer made it, with non-temporal stores")
			}
		}
		require.True(t, owner, "%d bytes: the polling owner made none of %d writes", c.n, pullTries)
		if c.pullable {
			t.Logf("%d bytes: the owner made write %d of the tries", c.n, tries)
		}
	}
	// The owner does not poll until the writer's completion: the writer makes it,
	// after the wait.
	pulled, streamed := write(i, hinted, 64<<10, false)
	require.Zero(t, pulled)
	require.Equal(t, int64(64<<10), streamed)

	// A chain of two (a message's landing pieces, posted at once) is the writer's,
	// both pieces, though the owner polls: it folds each while the next is written.
	const piece = 64 << 10
	testutil.Fill(r, src.b)
	p0, err := ctl.Pulled(hinted.mr)
	require.NoError(t, err)
	s0, err := ctl.Streamed(hinted.mr)
	require.NoError(t, err)
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2}))
	started := make(chan struct{})
	var rwcs []verbs.WC
	var rerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rwcs, rerr = pollUntil(b.cq, 2, started)
	}()
	<-started
	require.NoError(t, a.qp.PostSend(
		verbs.SendWR{ID: 1, Op: verbs.OpRDMAWriteWithImm, SGE: []verbs.SGE{src.sge(0, piece)}, RemoteAddr: hinted.addr(0), RKey: hinted.mr.RKey(), Imm: 1},
		verbs.SendWR{ID: 2, Op: verbs.OpRDMAWriteWithImm, SGE: []verbs.SGE{src.sge(piece, piece)}, Signaled: true,
			RemoteAddr: hinted.addr(piece), RKey: hinted.mr.RKey(), Imm: 2}))
	waitOK(t, a.cq, 1)
	wg.Wait()
	require.NoError(t, rerr)
	require.Len(t, rwcs, 2)
	for k, wc := range rwcs {
		require.NoError(t, wc.Err())
		require.Equal(t, uint32(k+1), wc.Imm, "in order")
	}
	testutil.Equal(t, src.b[:2*piece], hinted.b[:2*piece], "chain")
	p1, err := ctl.Pulled(hinted.mr)
	require.NoError(t, err)
	s1, err := ctl.Streamed(hinted.mr)
	require.NoError(t, err)
	require.Zero(t, p1-p0, "a chain's pieces are the writer's")
	require.Equal(t, int64(2*piece), s1-s0)
}

// TestSoftPullsExchange: two QPs write into each other's hinted memory at once, each
// from its own goroutine that posts and then polls its own CQ (an allreduce's
// exchange); every round completes with the bytes right, whoever made each write.
func TestSoftPullsExchange(t *testing.T) {
	a, b := softEnd(t, verbs.Options{}), softEnd(t, verbs.Options{})
	require.NoError(t, a.qp.Connect(roundTrip(t, b.qp.Info())))
	require.NoError(t, b.qp.Connect(roundTrip(t, a.qp.Info())))
	const n = 64 << 10
	hint := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.HintOwnerReads
	ends := []*end{a, b}
	srcs := []*buffer{newBuffer(t, a.pd, n, rw), newBuffer(t, b.pd, n, rw)}
	dsts := []*buffer{newBuffer(t, a.pd, n, hint), newBuffer(t, b.pd, n, hint)}
	r := testutil.Rand(t)
	for round := 0; round < 100; round++ {
		for k := range 2 {
			testutil.Fill(r, srcs[k].b)
			require.NoError(t, ends[k].qp.PostRecv(verbs.RecvWR{ID: uint64(round)}))
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				peer := dsts[1-k]
				if err := ends[k].qp.PostSend(verbs.SendWR{ID: uint64(round), Op: verbs.OpRDMAWriteWithImm, SGE: []verbs.SGE{srcs[k].sge(0, n)},
					Signaled: true, RemoteAddr: peer.addr(0), RKey: peer.mr.RKey(), Imm: uint32(round)}); err != nil {
					errs[k] = err
					return
				}
				wcs, err := pollUntil(ends[k].cq, 2, nil) // its write's and the peer's
				if err == nil {
					for _, wc := range wcs {
						if err = wc.Err(); err != nil {
							break
						}
					}
				}
				errs[k] = err
			}()
		}
		wg.Wait()
		for k := range 2 {
			require.NoError(t, errs[k], "round %d, side %d", round, k)
			testutil.Equal(t, srcs[k].b, dsts[1-k].b, fmt.Sprintf("round %d, side %d", round, k))
		}
	}
}
