package verbs_test

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestTeardownRandomOrders builds one of every kind of object, plus a
// failed registration, and closes them in random orders with repeats.
// Each Close must return nil or ErrBusy (never crash inside libibverbs);
// repeating passes until all are closed must end with nothing leaked.
// This is the Go form of the dereg-after-free crash: an MR whose DM, PD or
// context was "closed" first must come back as ErrBusy on the parent.
func TestTeardownRandomOrders(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		r := testutil.Rand(t)
		rounds := 200
		if !p.soft {
			rounds = 20 // under emulation each object is a syscall round trip
		}
		mem, err := unix.Mmap(-1, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		require.NoError(t, err)
		defer func() { require.NoError(t, unix.Munmap(mem)) }()
		before := verbs.LiveObjects()
		for round := 0; round < rounds; round++ {
			objs := build(t, p, mem, round)
			for pass := 0; len(objs) > 0; pass++ {
				require.Less(t, pass, 20, "objects never became closable: %v", names(objs))
				r.Shuffle(len(objs), func(i, j int) { objs[i], objs[j] = objs[j], objs[i] })
				var left []named
				for _, o := range objs {
					err := o.c.Close()
					if err != nil {
						require.ErrorIs(t, err, verbs.ErrBusy, "closing %s", o.name)
						left = append(left, o)
						continue
					}
					// Closing twice is fine.
					if r.IntN(3) == 0 {
						require.NoError(t, o.c.Close(), "second close of %s", o.name)
					}
				}
				objs = left
			}
		}
		require.Equal(t, before, verbs.LiveObjects(), "every object closed")
	})
}

type named struct {
	name string
	c    interface{ Close() error }
}

func names(objs []named) []string {
	var s []string
	for _, o := range objs {
		s = append(s, o.name)
	}
	return s
}

func build(t *testing.T, p provider, mem []byte, round int) []named {
	t.Helper()
	ctx, err := verbs.OpenWith(p.devA, p.opts)
	require.NoError(t, err)
	objs := []named{{"context", ctx}}
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	objs = append(objs, named{"pd", pd})
	cq, err := ctx.CreateCQ(4)
	require.NoError(t, err)
	cq2, err := ctx.CreateCQ(4)
	require.NoError(t, err)
	objs = append(objs, named{"cq", cq}, named{"cq2", cq2})
	mr, err := pd.RegMRAddr(uintptr(unsafe.Pointer(&mem[0])), len(mem), rw)
	require.NoError(t, err)
	objs = append(objs, named{"mr", mr})
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq2, MaxSendWR: 2, MaxRecvWR: 2})
	require.NoError(t, err)
	objs = append(objs, named{"qp", qp})

	// A failed registration leaves nothing to close.
	var bad *verbs.MR
	if p.soft {
		require.NoError(t, softControl(t, ctx).FailNth(verbs.FaultRegMR, 1))
		bad, err = pd.RegMRAddr(uintptr(unsafe.Pointer(&mem[0])), len(mem), rw)
		require.ErrorIs(t, err, verbs.ErrInjected)
	} else {
		bad, err = pd.RegMRAddr(4096, 4096, rw) // unmapped: the kernel refuses to pin it
		require.Error(t, err)
	}
	require.Nil(t, bad)
	objs = append(objs, named{"failed mr (nil)", bad})

	if p.hasDM {
		dm, err := ctx.AllocDM(4096)
		require.NoError(t, err)
		dmr, err := pd.RegDMMR(dm, 0, 4096, rw)
		require.NoError(t, err)
		objs = append(objs, named{"dm", dm}, named{"dm mr", dmr})
	} else {
		dm, err := ctx.AllocDM(4096)
		require.ErrorIs(t, err, verbs.ErrNotSupported)
		objs = append(objs, named{"unsupported dm (nil)", dm})
	}
	if round%2 == 1 {
		pd2, err := ctx.AllocPD()
		require.NoError(t, err)
		mr2, err := pd2.RegMR(make([]byte, 100), verbs.AccessLocalWrite)
		require.NoError(t, err)
		objs = append(objs, named{"pd2", pd2}, named{"go-heap mr", mr2})
	}
	return objs
}

// TestSoftFaultPostSend: FaultPostSend refuses the nth request counted across posts;
// the ones before it in its chain are posted and complete, the ones after it do
// not, and the error says how many went (PostedBefore).
func TestSoftFaultPostSend(t *testing.T) {
	r := testutil.Rand(t)
	a, b := connected(t, provider{devA: verbs.SoftDeviceName, devB: verbs.SoftDeviceName})
	const n, k = 256, 5
	src, dst := newBuffer(t, a.pd, n*k, rw), newBuffer(t, b.pd, n*k, rw)
	testutil.Fill(r, src.b)
	chain := func(ids ...int) []verbs.SendWR {
		var wrs []verbs.SendWR
		for _, i := range ids {
			wrs = append(wrs, verbs.SendWR{ID: uint64(i), Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(i*n, n)}, Signaled: true,
				RemoteAddr: dst.addr(i * n), RKey: dst.mr.RKey()})
		}
		return wrs
	}
	require.NoError(t, softControl(t, a.ctx).FailNth(verbs.FaultPostSend, 4))
	require.NoError(t, a.qp.PostSend(chain(0)...), "the fault counts requests: the 1st passes")
	err := a.qp.PostSend(chain(1, 2, 3, 4)...)
	require.ErrorIs(t, err, verbs.ErrInjected)
	require.ErrorIs(t, err, unix.ENOMEM)
	require.Contains(t, err.Error(), "post-send")
	require.Equal(t, 2, verbs.PostedBefore(err), "the 4th request is the chain's 3rd")
	wcs := waitOK(t, a.cq, 3)
	for i, wc := range wcs {
		require.Equal(t, uint64(i), wc.ID)
	}
	testutil.Equal(t, src.b[:3*n], dst.b[:3*n], "the posted writes")
	require.Equal(t, make([]byte, 2*n), dst.b[3*n:], "a refused write moved data")
	require.NoError(t, a.qp.PostSend(chain(3, 4)...), "the fault fires once")
	waitOK(t, a.cq, 2)
	testutil.Equal(t, src.b, dst.b, "reposted writes")
}

func TestSoftFaultInjection(t *testing.T) {
	ctx := open(t, verbs.SoftDeviceName)
	soft := softControl(t, ctx)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	closeLater(t, pd)
	cq, err := ctx.CreateCQ(4)
	require.NoError(t, err)
	closeLater(t, cq)
	for _, c := range []struct {
		kind verbs.FaultKind
		do   func() (interface{ Close() error }, error)
	}{
		{verbs.FaultRegMR, func() (interface{ Close() error }, error) { return pd.RegMR(make([]byte, 8), verbs.AccessLocalWrite) }},
		{verbs.FaultAllocDM, func() (interface{ Close() error }, error) { return ctx.AllocDM(64) }},
		{verbs.FaultCreateQP, func() (interface{ Close() error }, error) {
			return pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, MaxSendWR: 1})
		}},
		{verbs.FaultAllocPD, func() (interface{ Close() error }, error) { return ctx.AllocPD() }},
		{verbs.FaultCreateCQ, func() (interface{ Close() error }, error) { return ctx.CreateCQ(1) }},
	} {
		t.Run(c.kind.String(), func(t *testing.T) {
			require.NoError(t, soft.FailNth(c.kind, 3))
			for i := 1; i <= 4; i++ {
				o, err := c.do()
				if i == 3 {
					require.ErrorIs(t, err, verbs.ErrInjected, "the 3rd operation fails")
					require.ErrorIs(t, err, unix.ENOMEM)
					require.Contains(t, err.Error(), c.kind.String())
					continue
				}
				require.NoError(t, err, "operation %d", i)
				require.NoError(t, o.Close())
			}
		})
	}
	require.ErrorIs(t, soft.FailNth(verbs.FaultKind(99), 1), verbs.ErrInvalid)
	require.ErrorIs(t, soft.FailNth(verbs.FaultRegMR, 0), verbs.ErrInvalid)

	// A fault is per context: another soft0 context is not affected.
	require.NoError(t, soft.FailNth(verbs.FaultAllocPD, 1))
	other := open(t, verbs.SoftDeviceName)
	pd2, err := other.AllocPD()
	require.NoError(t, err)
	require.NoError(t, pd2.Close())
	_, err = ctx.AllocPD()
	require.ErrorIs(t, err, verbs.ErrInjected)
}

// TestSoftFaultDeregMR: FaultDeregMR fails the nth MR.Close: that MR stays registered
// (counted live, its memory still the device's), and a retried Close deregisters it.
func TestSoftFaultDeregMR(t *testing.T) {
	ctx := open(t, verbs.SoftDeviceName)
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	closeLater(t, pd)
	soft := softControl(t, ctx)
	require.NoError(t, soft.FailNth(verbs.FaultDeregMR, 2))
	var mrs []*verbs.MR
	for range 3 {
		mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
		require.NoError(t, err)
		mrs = append(mrs, mr)
	}
	live := verbs.LiveObjects()["mr"]
	require.NoError(t, mrs[0].Close())
	err = mrs[1].Close()
	require.ErrorIs(t, err, verbs.ErrInjected, "the 2nd Close fails")
	require.Contains(t, err.Error(), verbs.FaultDeregMR.String())
	require.Equal(t, live-1, verbs.LiveObjects()["mr"], "the failed Close left its MR registered")
	require.ErrorIs(t, pd.Close(), verbs.ErrBusy, "the PD still has the MR")
	require.NoError(t, mrs[2].Close())
	require.NoError(t, mrs[1].Close(), "the retried Close")
	require.Equal(t, live-3, verbs.LiveObjects()["mr"])
}

func TestSoftControlArguments(t *testing.T) {
	_, err := verbs.SoftControl(nil)
	require.ErrorIs(t, err, verbs.ErrInvalid)
	var nilSoft *verbs.Soft
	require.ErrorIs(t, nilSoft.FailNth(verbs.FaultRegMR, 1), verbs.ErrInvalid)
	require.ErrorIs(t, nilSoft.DelayCompletions(0), verbs.ErrInvalid)

	ctx, err := verbs.Open(verbs.SoftDeviceName)
	require.NoError(t, err)
	soft := softControl(t, ctx)
	require.ErrorIs(t, soft.DelayCompletions(-time.Second), verbs.ErrInvalid)
	_, err = soft.SetDMCapacity(-1)
	require.ErrorIs(t, err, verbs.ErrInvalid)
	require.ErrorIs(t, soft.BreakQP(nil), verbs.ErrInvalid)

	// A QP of another context is refused: a test breaks what it owns.
	e := newEnd(t, verbs.SoftDeviceName)
	require.ErrorIs(t, soft.BreakQP(e.qp), verbs.ErrInvalid)

	require.NoError(t, ctx.Close())
	require.ErrorIs(t, soft.FailNth(verbs.FaultRegMR, 1), verbs.ErrClosed)
	require.ErrorIs(t, soft.DelayCompletions(time.Millisecond), verbs.ErrClosed)
	_, err = soft.SetDMCapacity(1)
	require.ErrorIs(t, err, verbs.ErrClosed)
}

func TestSoftBreakQP(t *testing.T) {
	a, b := connected(t, provider{name: "soft", devA: verbs.SoftDeviceName, devB: verbs.SoftDeviceName})
	dst := newBuffer(t, b.pd, 64, rw)
	for i := 0; i < 3; i++ {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGE: []verbs.SGE{dst.sge(0, 64)}}))
	}
	require.NoError(t, softControl(t, b.ctx).BreakQP(b.qp))
	st, err := b.qp.State()
	require.NoError(t, err)
	require.Equal(t, verbs.QPStateError, st)
	for i, wc := range waitWCs(t, b.cq, 3) {
		require.Equal(t, verbs.WCWRFlushErr, wc.Status, "outstanding receives flush")
		require.Equal(t, uint64(i), wc.ID)
	}
	// The peer's next request fails instead of waiting forever.
	src := newBuffer(t, a.pd, 64, rw)
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 7, Op: verbs.OpSend, SGE: []verbs.SGE{src.sge(0, 64)}, Signaled: true}))
	wc := waitWCs(t, a.cq, 1)[0]
	require.Equal(t, uint64(7), wc.ID)
	require.Error(t, wc.Err())
}

func TestSoftDelayCompletions(t *testing.T) {
	const delay = 50 * time.Millisecond
	a, b := connected(t, provider{name: "soft", devA: verbs.SoftDeviceName, devB: verbs.SoftDeviceName})
	src := newBuffer(t, a.pd, 64, rw)
	dst := newBuffer(t, b.pd, 64, rw)
	soft := softControl(t, a.ctx)
	write := func(id uint64) time.Duration {
		start := time.Now()
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: id, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 64)},
			RemoteAddr: dst.addr(0), RKey: dst.mr.RKey(), Signaled: true}))
		wc := waitOK(t, a.cq, 1)[0]
		require.Equal(t, id, wc.ID)
		return time.Since(start)
	}
	require.NoError(t, soft.DelayCompletions(delay))
	require.GreaterOrEqual(t, write(1), delay, "the completion waits out the delay")
	require.NoError(t, soft.DelayCompletions(0))
	require.Less(t, write(2), delay, "a delay of 0 removes it")
}

func TestSoftDMCapacity(t *testing.T) {
	ctx := open(t, verbs.SoftDeviceName)
	soft := softControl(t, ctx)
	prev, err := soft.SetDMCapacity(8192)
	require.NoError(t, err)
	require.Equal(t, verbs.DefaultSoftDMCapacity, prev, "soft0 starts with the default capacity")
	t.Cleanup(func() {
		got, err := soft.SetDMCapacity(prev)
		require.NoError(t, err)
		require.Zero(t, got)
	})
	dm, err := ctx.AllocDM(8192)
	require.NoError(t, err)
	_, err = ctx.AllocDM(4)
	require.ErrorIs(t, err, unix.ENOMEM, "capacity is bounded")
	require.NoError(t, dm.Close())
	dm, err = ctx.AllocDM(4)
	require.NoError(t, err, "freed capacity is reusable")
	require.NoError(t, dm.Close())

	// The capacity is soft0's: a context opened later sees it too.
	prev2, err := soft.SetDMCapacity(0)
	require.NoError(t, err)
	require.Equal(t, 8192, prev2)
	other := open(t, verbs.SoftDeviceName)
	_, err = other.AllocDM(4)
	require.ErrorIs(t, err, verbs.ErrNotSupported, "a device without DM answers as rxe does")
}

func TestDevicesAndOpen(t *testing.T) {
	devs, err := verbs.Devices()
	require.NoError(t, err)
	var soft *verbs.DeviceInfo
	for i := range devs {
		t.Logf("device %s provider %s guid %#x ports %d netdev %q pci %q numa %d", devs[i].Name, devs[i].Provider,
			devs[i].NodeGUID, len(devs[i].Ports), devs[i].Netdev, devs[i].PCIAddr, devs[i].NUMANode)
		if devs[i].Name == verbs.SoftDeviceName {
			soft = &devs[i]
		}
	}
	require.NotNil(t, soft, "soft0 is always listed")
	require.Equal(t, "soft", soft.Provider)
	require.True(t, soft.Active())

	_, err = verbs.Open("no-such-device")
	require.ErrorIs(t, err, verbs.ErrNoDevice)
	require.Contains(t, err.Error(), "no-such-device")

	// "" picks the first active real device, else soft0. The environment
	// is not verbs' to read: a device named there changes nothing.
	t.Setenv(verbs.DeviceEnv, "no-such-device")
	t.Setenv(verbs.GIDIndexEnv, "999")
	ctx, err := verbs.Open("")
	require.NoError(t, err)
	wantReal := ""
	for _, d := range devs {
		if d.Provider == "ibv" && d.Active() {
			wantReal = d.Name
			break
		}
	}
	if wantReal == "" {
		require.Equal(t, verbs.SoftDeviceName, ctx.Name())
	} else {
		require.Equal(t, wantReal, ctx.Name())
	}
	attr, err := ctx.Query()
	require.NoError(t, err)
	require.NotEmpty(t, attr.Ports)
	require.NoError(t, ctx.Close())
}

func TestOpenWith(t *testing.T) {
	for _, o := range []verbs.Options{{}, {GIDIndex: -1}, {GIDIndex: 3}, {GIDIndex: 255}} {
		ctx, err := verbs.OpenWith(verbs.SoftDeviceName, o)
		require.NoError(t, err, "%+v: soft0 has one GID and ignores GIDIndex", o)
		require.Equal(t, verbs.SoftDeviceName, ctx.Name())
		require.NoError(t, ctx.Close())
	}
	ctx, err := verbs.OpenWith(verbs.SoftDeviceName, verbs.Options{GIDIndex: 256})
	require.ErrorIs(t, err, verbs.ErrInvalid)
	require.ErrorContains(t, err, "Options.GIDIndex")
	require.Nil(t, ctx)
	_, err = verbs.OpenWith("no-such-device", verbs.Options{})
	require.ErrorIs(t, err, verbs.ErrNoDevice)
}

func TestQPInfoWire(t *testing.T) {
	r := testutil.Rand(t)
	for i := 0; i < 100; i++ {
		var in verbs.QPInfo
		in.LID, in.QPN, in.PSN, in.Port, in.GIDIndex, in.MTU, in.DeviceGUID = uint16(r.Uint32()), r.Uint32(), r.Uint32()&0xffffff,
			uint8(r.Uint32()), uint8(r.Uint32()), uint16(r.Uint32()), r.Uint64()
		testutil.Fill(r, in.GID[:])
		roundTrip(t, in)
	}
	var q verbs.QPInfo
	b, _ := q.MarshalBinary()
	b[0] = 99
	require.ErrorIs(t, q.UnmarshalBinary(b), verbs.ErrInvalid, "unknown version")
	require.ErrorIs(t, q.UnmarshalBinary(nil), verbs.ErrInvalid)
}

func TestErrorWrapping(t *testing.T) {
	e := &verbs.Error{Op: "RegMR", Kind: verbs.ErrBusy, Errno: unix.EBUSY, Detail: "x"}
	require.ErrorIs(t, e, verbs.ErrBusy)
	require.ErrorIs(t, e, unix.EBUSY)
	require.False(t, errors.Is(e, verbs.ErrClosed))
	require.Contains(t, e.Error(), "RegMR")
	for s := verbs.WCSuccess; s <= verbs.WCGeneralErr; s++ {
		require.NotContains(t, s.String(), "WCStatus(", "status %d has a name", s)
	}
	wc := verbs.WC{Status: verbs.WCRemAccessErr, ID: 4}
	require.ErrorContains(t, wc.Err(), "REM_ACCESS_ERR")
	require.NoError(t, (&verbs.WC{}).Err())
	require.Equal(t, "local-write|remote-read", fmt.Sprint(verbs.AccessLocalWrite|verbs.AccessRemoteRead))
}
