package verbs_test

import (
	"errors"
	"fmt"
	"testing"
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
		if p.name == "ibv" {
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
	ctx, err := verbs.Open(p.devA)
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
	if p.name == "soft" {
		require.NoError(t, ctx.InjectFault(verbs.FaultRegMR, 1))
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

func TestSoftFaultInjection(t *testing.T) {
	ctx := open(t, verbs.SoftDeviceName)
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
			require.NoError(t, ctx.InjectFault(c.kind, 3))
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
	require.ErrorIs(t, ctx.InjectFault(verbs.FaultKind(99), 1), verbs.ErrInvalid)
	require.ErrorIs(t, ctx.InjectFault(verbs.FaultRegMR, 0), verbs.ErrInvalid)
}

func TestSoftCompletionDelayAndDMCapacity(t *testing.T) {
	prev := verbs.SetSoftDMCapacity(8192)
	defer verbs.SetSoftDMCapacity(prev)
	ctx := open(t, verbs.SoftDeviceName)
	dm, err := ctx.AllocDM(8192)
	require.NoError(t, err)
	_, err = ctx.AllocDM(4)
	require.ErrorIs(t, err, unix.ENOMEM, "capacity is bounded")
	require.NoError(t, dm.Close())
	dm, err = ctx.AllocDM(4)
	require.NoError(t, err, "freed capacity is reusable")
	require.NoError(t, dm.Close())

	verbs.SetSoftDMCapacity(0)
	_, err = ctx.AllocDM(4)
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

	// "" picks $IBCOLL_DEVICE, else the first active real device, else soft0.
	t.Setenv(verbs.DeviceEnv, verbs.SoftDeviceName)
	ctx, err := verbs.Open("")
	require.NoError(t, err)
	require.Equal(t, verbs.SoftDeviceName, ctx.Name())
	require.NoError(t, ctx.Close())
	t.Setenv(verbs.DeviceEnv, "")
	ctx, err = verbs.Open("")
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
