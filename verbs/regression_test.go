package verbs_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/verbs"
)

// Regressions found in review; each failed before its fix.

// Signaled completions match signaled requests exactly while the send queue
// wraps under two posting goroutines (a completion was read from a slot
// already reused by a new post).
func TestSignaledAccountingWhileQueueWraps(t *testing.T) {
	ctx := open(t, verbs.SoftDeviceName)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	closeLater(t, pd)
	cq, err := ctx.CreateCQ(1 << 16)
	require.NoError(t, err)
	closeLater(t, cq)
	mk := func() *verbs.QP {
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
		require.NoError(t, err)
		closeLater(t, qp)
		return qp
	}
	a, b := mk(), mk()
	require.NoError(t, a.Connect(b.Info()))
	require.NoError(t, b.Connect(a.Info()))
	src := newBuffer(t, pd, 1<<16, rw)
	dst := newBuffer(t, pd, 1<<16, rw)
	var signaled atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				sig := (i+g)%2 == 0
				wrs := []verbs.SendWR{{ID: uint64(i), Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 1<<14)}, Signaled: sig,
					RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}}
				if a.PostSend(wrs...) == nil && sig {
					signaled.Add(1)
				}
			}
		}()
	}
	got := 0
	wcs := make([]verbs.WC, 64)
	for time.Now().Before(deadline.Add(500 * time.Millisecond)) {
		k, err := cq.Poll(wcs)
		require.NoError(t, err)
		for _, wc := range wcs[:k] {
			require.NoError(t, wc.Err())
		}
		got += k
		if k == 0 {
			c, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			_ = cq.Wait(c)
			cancel()
		}
	}
	wg.Wait()
	require.Equal(t, int(signaled.Load()), got, "completions != signaled requests")
}

func TestDMBoundsDoNotOverflow(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		if !p.hasDM {
			return
		}
		ctx := p.open(t)
		dm, err := ctx.AllocDM(64)
		require.NoError(t, err)
		closeLater(t, dm)
		off := math.MaxInt - 3
		require.ErrorIs(t, dm.CopyTo(off, make([]byte, 4)), verbs.ErrInvalid)
		require.ErrorIs(t, dm.CopyFrom(make([]byte, 4), off), verbs.ErrInvalid)
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		closeLater(t, pd)
		mr, err := pd.RegDMMR(dm, 8, math.MaxInt-4, rw)
		require.ErrorIs(t, err, verbs.ErrInvalid)
		require.Nil(t, mr)
	})
}

// A Wait blocked on a CQ must not hold up CreateQP or QP.Close on it.
func TestWaitDoesNotBlockQPCreateOrClose(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx := p.open(t)
		pd, err := ctx.AllocPD()
		require.NoError(t, err)
		closeLater(t, pd)
		cq, err := ctx.CreateCQ(16)
		require.NoError(t, err)
		closeLater(t, cq)
		qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for wctx.Err() == nil {
				_ = cq.Wait(wctx)
			}
		}()
		time.Sleep(100 * time.Millisecond)
		t0 := time.Now()
		require.NoError(t, qp.Close())
		qp2, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
		require.NoError(t, err)
		require.NoError(t, qp2.Close())
		took := time.Since(t0)
		cancel()
		<-done
		require.Less(t, took, time.Second, "QP.Close and CreateQP waited behind CQ.Wait")
	})
}

// MR.Close of a Send's source returns while the Send waits for the peer's
// receive (RNR), as ibv_dereg_mr does.
func TestMRCloseDuringRNR(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, _ := connected(t, p)
		src := newBuffer(t, a.pd, 4096, rw)
		mr2, err := a.pd.RegMRAddr(uintptr(src.mr.Addr()), 4096, rw)
		require.NoError(t, err)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpSend, SGE: []verbs.SGE{{Addr: mr2.Addr(), Length: 64, LKey: mr2.LKey()}}, Signaled: true}))
		time.Sleep(100 * time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- mr2.Close() }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(3 * time.Second):
			require.NoError(t, a.qp.MoveToError())
			<-done
			t.Fatal("MR.Close blocked while a Send waited for a receive")
		}
		require.NoError(t, a.qp.MoveToError())
		waitWCs(t, a.cq, 1)
	})
}

// A receive taken by an in-flight send completes before later receives
// are flushed, when the receiver moves to the error state meanwhile.
func TestRecvCompletionsStayOrderedOnError(t *testing.T) {
	p := provider{name: "soft", devA: verbs.SoftDeviceName, devB: verbs.SoftDeviceName}
	for iter := 0; iter < 10; iter++ {
		a, b := connected(t, p)
		const n = 8 << 20
		src := newBuffer(t, a.pd, n, rw)
		dst := newBuffer(t, b.pd, n, rw)
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 1, SGE: []verbs.SGE{dst.sge(0, n)}},
			verbs.RecvWR{ID: 2, SGE: []verbs.SGE{dst.sge(0, n)}}))
		go func() {
			_ = a.qp.PostSend(verbs.SendWR{ID: 9, Op: verbs.OpSend, SGE: []verbs.SGE{src.sge(0, n)}, Signaled: true})
		}()
		time.Sleep(time.Duration(iter%3) * time.Millisecond)
		require.NoError(t, b.qp.MoveToError())
		wcs := waitWCs(t, b.cq, 2)
		waitWCs(t, a.cq, 1)
		require.Equal(t, uint64(1), wcs[0].ID, "iteration %d: receive completions out of order: %+v", iter, wcs)
	}
}

// A QP whose responder is connected to another QP delivers nothing.
func TestThirdPartyWriteNotDelivered(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		_, b := connected(t, p)
		c := newEndWith(t, p.devA, p.opts)
		require.NoError(t, c.qp.Connect(roundTrip(t, b.qp.Info())))
		src := newBuffer(t, c.pd, 64, rw)
		dst := newBuffer(t, b.pd, 64, rw)
		for i := range src.b {
			src.b[i] = 0x5A
		}
		require.NoError(t, c.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 64)},
			Signaled: true, RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		wcs := make([]verbs.WC, 1)
		for ctx.Err() == nil {
			if k, err := c.cq.Poll(wcs); err != nil || k == 1 {
				break
			}
			_ = c.cq.Wait(ctx)
		}
		require.NotEqual(t, byte(0x5A), dst.b[0], "data delivered by a QP the responder is not connected to")
		_ = c.qp.MoveToError()
	})
}

// Out-of-range sizes and inline misuse are argument errors, never a crash
// or a silent truncation in C.
func TestHugeAndInlineArguments(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		e := newEndWith(t, p.devA, p.opts)
		cq, err := e.ctx.CreateCQ(1 << 40)
		require.ErrorIs(t, err, verbs.ErrInvalid)
		require.Nil(t, cq)
		_, err = e.ctx.CreateCQ(1<<32 + 4)
		require.ErrorIs(t, err, verbs.ErrInvalid)
		for _, cfg := range []verbs.QPConfig{
			{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 1 << 36, MaxRecvWR: 1},
			{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 1, MaxRecvWR: 1 << 36},
			{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 1, MaxRecvWR: 1, MaxSGE: 1 << 36},
			{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 16, MaxRecvWR: 1, MaxInline: 1 << 30},
		} {
			qp, err := e.pd.CreateQP(cfg)
			require.ErrorIs(t, err, verbs.ErrInvalid, "%+v", cfg)
			require.Nil(t, qp)
		}
		a, b := connected(t, p)
		loc := newBuffer(t, a.pd, 64, rw)
		rem := newBuffer(t, b.pd, 64, rw)
		require.ErrorIs(t, a.qp.PostSend(verbs.SendWR{Op: verbs.OpRDMAWrite, Inline: true, SGE: []verbs.SGE{{Addr: 0, Length: 16}},
			RemoteAddr: rem.addr(0), RKey: rem.mr.RKey()}), verbs.ErrInvalid, "inline data at address 0")
		require.ErrorIs(t, a.qp.PostSend(verbs.SendWR{Op: verbs.OpRDMARead, Inline: true, SGE: []verbs.SGE{loc.sge(0, 32)},
			RemoteAddr: rem.addr(0), RKey: rem.mr.RKey()}), verbs.ErrInvalid, "inline read")
		wrs := make([]verbs.SendWR, 65) // the QP holds 64
		for i := range wrs {
			wrs[i] = verbs.SendWR{Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{loc.sge(0, 8)}, RemoteAddr: rem.addr(0), RKey: rem.mr.RKey()}
		}
		require.ErrorIs(t, a.qp.PostSend(wrs...), verbs.ErrInvalid, "more requests than the send queue holds")
		rwrs := make([]verbs.RecvWR, 65)
		require.ErrorIs(t, a.qp.PostRecv(rwrs...), verbs.ErrInvalid, "more receives than the queue holds")
	})
}

// Every goroutine waiting on a CQ wakes at the next completion, not only one.
func TestAllWaitersWake(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := connected(t, p)
		src := newBuffer(t, a.pd, 64, rw)
		dst := newBuffer(t, b.pd, 64, rw)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if !p.soft {
			// Arm the CQ: the first ibv Wait only requests notification.
			require.NoError(t, a.cq.Wait(ctx))
		}
		var woke atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if a.cq.Wait(ctx) == nil {
					woke.Add(1)
				}
			}()
		}
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 64)}, Signaled: true,
			RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}))
		wg.Wait()
		require.Equal(t, int32(3), woke.Load(), "every waiter returned before its deadline")
		waitOK(t, a.cq, 1)
	})
}
