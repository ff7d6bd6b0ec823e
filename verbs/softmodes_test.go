package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// soft0 opened without device memory reports none and refuses it, while a
// context opened as usual beside it keeps its own.
func TestSoftNoDM(t *testing.T) {
	none := newEndWith(t, verbs.SoftDeviceName, verbs.Options{SoftNoDM: true})
	attr, err := none.ctx.Query()
	require.NoError(t, err)
	require.Zero(t, attr.MaxDMSize)
	dm, err := none.ctx.AllocDM(64)
	require.ErrorIs(t, err, verbs.ErrNotSupported)
	require.Nil(t, dm)

	full := open(t, verbs.SoftDeviceName)
	attr, err = full.Query()
	require.NoError(t, err)
	require.NotZero(t, attr.MaxDMSize, "SoftNoDM is per context")
	require.False(t, attr.DMUncachedReads, "soft0's device memory is host memory")
}

// soft0 opened with SoftDMUncached reports its device memory as a real device's, which
// the CPU reads through uncached loads; without device memory it reports nothing of
// the kind, and a context opened as usual beside it keeps the plain report.
func TestSoftDMUncached(t *testing.T) {
	for _, c := range []struct {
		o    verbs.Options
		want bool
	}{
		{verbs.Options{SoftDMUncached: true}, true},
		{verbs.Options{SoftDMUncached: true, SoftNoDM: true}, false},
		{verbs.Options{}, false},
	} {
		e := newEndWith(t, verbs.SoftDeviceName, c.o)
		attr, err := e.ctx.Query()
		require.NoError(t, err)
		require.Equal(t, c.want, attr.DMUncachedReads, "%+v", c.o)
	}
}

// soft0 opened with an InfiniBand port: every context has a LID of its own,
// QPs publish it and no GID, Connect addresses by LID (LID 0 and a wrong LID
// are refused), and data moves over the connection.
func TestSoftInfiniBandLIDs(t *testing.T) {
	ib := verbs.Options{SoftLinkLayer: verbs.LinkLayerInfiniBand}
	a, b := newEndWith(t, verbs.SoftDeviceName, ib), newEndWith(t, verbs.SoftDeviceName, ib)
	for _, e := range []*end{a, b} {
		attr, err := e.ctx.Query()
		require.NoError(t, err)
		require.Equal(t, verbs.LinkLayerInfiniBand, attr.Ports[0].LinkLayer)
		require.Greater(t, attr.Ports[0].LID, uint16(1), "a LID of its own, not the default port's")
		require.Equal(t, attr.Ports[0].LID, e.qp.Info().LID)
		require.True(t, e.qp.Info().GID.IsZero(), "no GRH on InfiniBand")
		require.Equal(t, verbs.LinkLayerInfiniBand, e.ctx.Info().Ports[0].LinkLayer)
		require.Empty(t, e.ctx.Info().Ports[0].GIDs)
	}
	ai, bi := a.qp.Info(), b.qp.Info()
	require.NotEqual(t, ai.LID, bi.LID)

	noLID := bi
	noLID.LID = 0
	require.ErrorIs(t, a.qp.Connect(noLID), verbs.ErrInvalid)
	wrong := bi
	wrong.LID = ai.LID
	require.ErrorIs(t, a.qp.Connect(wrong), verbs.ErrInvalid)

	require.NoError(t, a.qp.Connect(bi))
	require.NoError(t, b.qp.Connect(ai))
	moveRandom(t, a, b)
}

// soft0 opened with a RoCE port: LID 0, a RoCE v2 GID, and Connect addresses
// by GID (a zero GID is refused).
func TestSoftRoCEGIDs(t *testing.T) {
	roce := verbs.Options{SoftLinkLayer: verbs.LinkLayerEthernet}
	a, b := newEndWith(t, verbs.SoftDeviceName, roce), newEndWith(t, verbs.SoftDeviceName, roce)
	attr, err := a.ctx.Query()
	require.NoError(t, err)
	require.Equal(t, verbs.LinkLayerEthernet, attr.Ports[0].LinkLayer)
	require.Zero(t, attr.Ports[0].LID)
	require.Equal(t, verbs.GIDTypeRoCEv2, a.ctx.Info().Ports[0].GIDs[0].Type)
	ai, bi := a.qp.Info(), b.qp.Info()
	require.Zero(t, ai.LID)
	require.False(t, ai.GID.IsZero())
	noGID := bi
	noGID.GID = verbs.GID{}
	require.ErrorIs(t, a.qp.Connect(noGID), verbs.ErrInvalid)
	require.NoError(t, a.qp.Connect(bi))
	require.NoError(t, b.qp.Connect(ai))
	moveRandom(t, a, b)

	_, err = verbs.OpenWith(verbs.SoftDeviceName, verbs.Options{SoftLinkLayer: 9})
	require.ErrorIs(t, err, verbs.ErrInvalid, "a link layer that does not exist")
}

// moveRandom RDMA-writes seeded random bytes from a to b and checks them.
func moveRandom(t *testing.T, a, b *end) {
	t.Helper()
	src := newBuffer(t, a.pd, 4096, rw)
	dst := newBuffer(t, b.pd, 4096, rw)
	testutil.Fill(testutil.Rand(t), src.b)
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{src.sge(0, 4096)}, Signaled: true,
		RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}))
	require.NoError(t, waitWCs(t, a.cq, 1)[0].Err())
	testutil.Equal(t, src.b, dst.b, "RDMA write")
}

// soft0 opened without atomics answers a peer's atomic with a remote access error, as
// a QP without remote atomic access does, and leaves the word as it was; the peer's
// own atomics are refused at post (TestContractAtomics' soft-ib case).
func TestSoftNoAtomicsResponder(t *testing.T) {
	a := newEndWith(t, verbs.SoftDeviceName, verbs.Options{})
	b := newEndWith(t, verbs.SoftDeviceName, verbs.Options{SoftNoAtomics: true})
	require.NoError(t, a.qp.Connect(b.qp.Info()))
	require.NoError(t, b.qp.Connect(a.qp.Info()))
	res := newBuffer(t, a.pd, 8, rw)
	word := newBuffer(t, b.pd, 64, rw)
	testutil.Fill(testutil.Rand(t), word.b)
	before := append([]byte(nil), word.b...)
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpAtomicFetchAdd, SGE: []verbs.SGE{res.sge(0, 8)}, Signaled: true,
		RemoteAddr: word.addr(8), RKey: word.mr.RKey(), CompareAdd: 1}))
	wc := waitWCs(t, a.cq, 1)[0]
	require.Equal(t, verbs.WCRemAccessErr, wc.Status)
	testutil.Equal(t, before, word.b, "the word is as it was")
}
