package verbs_test

import (
	"context"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	testutil.LeakCheck(m, verbs.CheckLeaks)
}

// provider is one way of getting two connectable devices.
type provider struct {
	name   string // "soft", "soft-nodm", "soft-ib", "soft-roce" or "ibv"
	devA   string
	devB   string
	opts   verbs.Options // how both devices are opened
	hasDM  bool          // queried: devA reports device memory (MaxDMSize > 0)
	soft   bool          // queried: devA is the in-process provider (its error statuses, fault injection)
	rdmaOK bool
}

// The soft0 variants: its own port, and opened as a device without device
// memory, with an InfiniBand port (LIDs, no GRH; and no atomics) and with a RoCE
// port (GIDs), so that both branches of every capability check run on every
// machine.
var softVariants = []struct {
	name string
	opts verbs.Options
}{
	{"soft", verbs.Options{}},
	{"soft-nodm", verbs.Options{SoftNoDM: true}},
	{"soft-ib", verbs.Options{SoftLinkLayer: verbs.LinkLayerInfiniBand, SoftNoAtomics: true}},
	{"soft-roce", verbs.Options{SoftLinkLayer: verbs.LinkLayerEthernet, SoftNoDM: true}},
}

// providers lists the providers present: the soft0 variants always, ibv when a
// real device exists. The ibv pair uses two devices when there are two (rxe0
// and rxe1 in the VM), so traffic crosses a real wire. What each has (device
// memory) is queried, never inferred from its name.
func providers(t *testing.T) []provider {
	t.Helper()
	devs, err := verbs.Devices()
	require.NoError(t, err)
	var out []provider
	for _, v := range softVariants {
		out = append(out, provider{name: v.name, devA: verbs.SoftDeviceName, devB: verbs.SoftDeviceName, opts: v.opts})
	}
	var real []string
	for _, d := range devs {
		if d.Provider == "ibv" && d.Active() {
			real = append(real, d.Name)
		}
	}
	switch len(real) {
	case 0:
		out = append(out, provider{name: "ibv"})
	case 1:
		out = append(out, provider{name: "ibv", devA: real[0], devB: real[0], rdmaOK: true})
	default:
		out = append(out, provider{name: "ibv", devA: real[0], devB: real[1], rdmaOK: true})
	}
	for i := range out {
		if out[i].devA == "" {
			continue
		}
		ctx, err := verbs.OpenWith(out[i].devA, out[i].opts)
		require.NoError(t, err, "opening %s", out[i].devA)
		attr, err := ctx.Query()
		require.NoError(t, err)
		require.NoError(t, ctx.Close())
		out[i].hasDM = attr.MaxDMSize > 0
		out[i].soft = attr.Provider == "soft"
	}
	return out
}

// open opens the provider's first device with its options.
func (p provider) open(t *testing.T) *verbs.Context {
	t.Helper()
	ctx, err := verbs.OpenWith(p.devA, p.opts)
	require.NoError(t, err)
	closeLater(t, ctx)
	return ctx
}

// forEachProvider runs fn as a subtest per provider; the ibv subtest
// skips (or fails under IBCOLL_REQUIRE=rdma) when no real device exists.
func forEachProvider(t *testing.T, fn func(t *testing.T, p provider)) {
	for _, p := range providers(t) {
		t.Run(p.name, func(t *testing.T) {
			if p.name == "ibv" {
				testutil.RequireRDMA(t, p.rdmaOK, "no active libibverbs device")
				t.Logf("provider ibv on %s <-> %s", p.devA, p.devB)
			}
			fn(t, p)
		})
	}
}

func closeLater(t testing.TB, c interface{ Close() error }) {
	t.Helper()
	t.Cleanup(func() { require.NoError(t, c.Close()) })
}

func open(t *testing.T, name string) *verbs.Context {
	t.Helper()
	ctx, err := verbs.Open(name)
	require.NoError(t, err)
	closeLater(t, ctx)
	return ctx
}

// softControl returns ctx's soft control surface, or fails t.
func softControl(t *testing.T, ctx *verbs.Context) *verbs.Soft {
	t.Helper()
	s, err := verbs.SoftControl(ctx)
	require.NoError(t, err)
	return s
}

// end is one side of a connection.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
}

func newEnd(t *testing.T, dev string) *end {
	t.Helper()
	return newEndWith(t, dev, verbs.Options{})
}

func newEndWith(t *testing.T, dev string, o verbs.Options) *end {
	t.Helper()
	ctx, err := verbs.OpenWith(dev, o)
	require.NoError(t, err)
	closeLater(t, ctx)
	e := &end{ctx: ctx}
	e.pd, err = e.ctx.AllocPD()
	require.NoError(t, err)
	closeLater(t, e.pd)
	e.cq, err = e.ctx.CreateCQ(256)
	require.NoError(t, err)
	closeLater(t, e.cq)
	e.qp, err = e.pd.CreateQP(verbs.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 64, MaxRecvWR: 64, MaxSGE: 4, MaxInline: 64})
	require.NoError(t, err)
	closeLater(t, e.qp)
	return e
}

// connected returns two ends with QPs connected to each other.
func connected(t *testing.T, p provider) (*end, *end) {
	t.Helper()
	a, b := newEndWith(t, p.devA, p.opts), newEndWith(t, p.devB, p.opts)
	ia, ib := roundTrip(t, a.qp.Info()), roundTrip(t, b.qp.Info())
	require.NoError(t, a.qp.Connect(ib))
	require.NoError(t, b.qp.Connect(ia))
	return a, b
}

// roundTrip sends QP info through its wire form, as a peer would get it.
func roundTrip(t *testing.T, in verbs.QPInfo) verbs.QPInfo {
	t.Helper()
	b, err := in.MarshalBinary()
	require.NoError(t, err)
	var out verbs.QPInfo
	require.NoError(t, out.UnmarshalBinary(b))
	require.Equal(t, in, out)
	return out
}

// buffer is registered mmap'd memory, as long-lived buffers are in ibcoll.
type buffer struct {
	b  []byte
	mr *verbs.MR
}

func newBuffer(t testing.TB, pd *verbs.PD, n int, access verbs.Access) *buffer {
	t.Helper()
	m, err := unix.Mmap(-1, 0, max(n, 1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, unix.Munmap(m)) })
	mr, err := pd.RegMRAddr(uintptr(unsafe.Pointer(&m[0])), n, access)
	require.NoError(t, err)
	closeLater(t, mr)
	return &buffer{b: m[:n], mr: mr}
}

func (b *buffer) sge(off, n int) verbs.SGE {
	return verbs.SGE{Addr: b.mr.Addr() + uint64(off), Length: uint32(n), LKey: b.mr.LKey()}
}

func (b *buffer) addr(off int) uint64 { return b.mr.Addr() + uint64(off) }

const rw = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// waitWCs polls cq until n completions arrived, blocking on the completion
// channel in between, and fails after a generous deadline (rxe under TCG
// is slow).
func waitWCs(t *testing.T, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 16)
	for len(out) < n {
		k, err := cq.Poll(buf[:min(len(buf), n-len(out))])
		require.NoError(t, err)
		out = append(out, buf[:k]...)
		if k == 0 {
			require.NoError(t, cq.Wait(ctx), "waiting for %d completions, have %d", n, len(out))
		}
	}
	return out
}

func waitOK(t *testing.T, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	wcs := waitWCs(t, cq, n)
	for _, wc := range wcs {
		require.NoError(t, wc.Err())
	}
	return wcs
}

func benchBuffer(b *testing.B, pd *verbs.PD, n int) *buffer { return newBuffer(b, pd, n, rw) }

// dmWithMR allocates n bytes of e's device memory and registers them whole (zero-based,
// rw); the DM closes at the end of t, the MR is the caller's to close.
func dmWithMR(t *testing.T, e *end, n int) (*verbs.DM, *verbs.MR) {
	t.Helper()
	dm, err := e.ctx.AllocDM(n)
	require.NoError(t, err)
	closeLater(t, dm)
	mr, err := e.pd.RegDMMR(dm, 0, n, rw)
	require.NoError(t, err)
	return dm, mr
}
