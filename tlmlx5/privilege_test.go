package tlmlx5

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestLeastPrivilege: a collective's source is registered for local access only and
// its destination for remote write only (no remote read, no atomics); a bcast's Src
// off the root receives, so it takes remote write. A peer that holds the keys still
// cannot write a source or read a destination: the NIC refuses with a remote access
// error. The transport's scratch receives too, and carries verbs.HintOwnerReads
// (this rank reads what lands there), nothing more.
func TestLeastPrivilege(t *testing.T) {
	ft := newFakeTeam(t, 3, nil)
	rnd := rand.New(rand.NewPCG(7, 11))
	pd := ft.ctx.(*context).pd
	scratches := 0
	for _, c := range []collective.Type{collective.Gather, collective.Scatter, collective.Allreduce, collective.Bcast} {
		cs := newCase(rnd, c, "", 3, 1, 64, false)
		runs := cs.build(t, ft.newSeq())
		for r, rr := range runs {
			tk, err := ft.newTask(r, &rr.spec)
			require.NoError(t, err, "%v rank %d", c, r)
			k := tk.(*task)
			if k.src.mr != nil {
				want := readAccess
				if c == collective.Bcast && r != cs.root {
					want = receiveAccess
				}
				require.Equal(t, want, k.src.mr.Access(), "%v rank %d: Src", c, r)
			}
			if k.dst.mr != nil {
				require.Equal(t, receiveAccess, k.dst.mr.Access(), "%v rank %d: Dst", c, r)
			}
			for _, lb := range k.bufs {
				if lb.own != nil && lb.mr != nil {
					require.Equal(t, scratchAccess, lb.mr.Access(), "%v rank %d: scratch", c, r)
					scratches++
				}
			}
			if c == collective.Gather && r == cs.root {
				attack(t, pd, k.src.mr, verbs.OpRDMAWrite, "write a source")
				attack(t, pd, k.dst.mr, verbs.OpRDMARead, "read a destination")
			}
			require.NoError(t, tk.Close())
		}
	}
	require.NotZero(t, scratches, "no case used the transport's scratch: the check above saw nothing")
}

// attack connects a QP of a stranger's context to a QP in the team's protection domain
// and tries op on mr with its keys: it must end in a remote access error.
func attack(t *testing.T, pd *verbs.PD, mr *verbs.MR, op verbs.Opcode, what string) {
	t.Helper()
	dev := pd.Context()
	victimCQ, err := dev.CreateCQ(16)
	require.NoError(t, err)
	defer victimCQ.Close()
	victim, err := pd.CreateQP(verbs.QPConfig{SendCQ: victimCQ, RecvCQ: victimCQ, MaxSendWR: 4, MaxRecvWR: 4, MaxSGE: 1})
	require.NoError(t, err)
	defer victim.Close()

	actx, err := verbs.Open(dev.Name())
	require.NoError(t, err)
	defer actx.Close()
	apd, err := actx.AllocPD()
	require.NoError(t, err)
	defer apd.Close()
	acq, err := actx.CreateCQ(16)
	require.NoError(t, err)
	defer acq.Close()
	aqp, err := apd.CreateQP(verbs.QPConfig{SendCQ: acq, RecvCQ: acq, MaxSendWR: 4, MaxRecvWR: 4, MaxSGE: 1})
	require.NoError(t, err)
	defer aqp.Close()
	buf := make([]byte, 64)
	amr, err := apd.RegMR(buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	defer amr.Close()
	require.NoError(t, aqp.Connect(victim.Info()))
	require.NoError(t, victim.Connect(aqp.Info()))

	n := min(64, mr.Len())
	require.NoError(t, aqp.PostSend(verbs.SendWR{ID: 1, Op: op, Signaled: true,
		SGE:        []verbs.SGE{{Addr: amr.Addr(), Length: uint32(n), LKey: amr.LKey()}},
		RemoteAddr: mr.Addr(), RKey: mr.RKey()}))
	wcs := make([]verbs.WC, 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := acq.Poll(wcs)
		require.NoError(t, err)
		if got == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no completion for the attempt to %s", what)
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, verbs.WCRemAccessErr, wcs[0].Status, "a peer tried to %s: %v", what, wcs[0].Err())
}
