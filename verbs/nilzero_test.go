package verbs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/verbs"
)

// TestNilAndZeroObjects: a nil object, or a zero one that no constructor made, answers
// every method with an error wrapping ErrInvalid or its zero value: no panic, and no
// child counted on a zero parent (a zero PD's RegMR counted one, after which the PD
// reported a live child for ever). The lifecycle front end refuses zero objects, so
// every method that goes through it is covered by these.
func TestNilAndZeroObjects(t *testing.T) {
	buf := make([]byte, 64)
	for name, c := range map[string]*verbs.Context{"nil": nil, "zero": {}} {
		_, err := c.AllocPD()
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s Context AllocPD", name)
		_, err = c.CreateCQ(4)
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s Context CreateCQ", name)
		_, err = c.AllocDM(64)
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s Context AllocDM", name)
		_, err = c.Query()
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s Context Query", name)
		require.Empty(t, c.Name()+c.Provider(), "%s Context names", name)
		_ = c.Info()
		_, err = verbs.SoftControl(c)
		require.Error(t, err, "%s Context SoftControl", name)
	}
	require.ErrorIs(t, (&verbs.Context{}).Close(), verbs.ErrInvalid, "zero Context Close")
	for name, p := range map[string]*verbs.PD{"nil": nil, "zero": {}} {
		_, err := p.RegMR(buf, verbs.AccessLocalWrite)
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s PD RegMR", name)
		_, err = p.CreateQP(verbs.QPConfig{})
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s PD CreateQP", name)
		require.Nil(t, p.Context(), "%s PD Context", name)
	}
	require.ErrorIs(t, (&verbs.PD{}).Close(), verbs.ErrInvalid, "zero PD Close: no child was counted")
	_, err := (&verbs.PD{}).CreateQP(verbs.QPConfig{SendCQ: &verbs.CQ{}, RecvCQ: &verbs.CQ{}, MaxSendWR: 1})
	require.ErrorIs(t, err, verbs.ErrInvalid, "zero PD CreateQP with zero CQs")
	for name, c := range map[string]*verbs.CQ{"nil": nil, "zero": {}} {
		_, err := c.Poll(make([]verbs.WC, 4))
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s CQ Poll", name)
		require.ErrorIs(t, c.Wait(context.Background()), verbs.ErrInvalid, "%s CQ Wait", name)
		require.Zero(t, c.Depth(), "%s CQ Depth", name)
	}
	for name, q := range map[string]*verbs.QP{"nil": nil, "zero": {}} {
		require.ErrorIs(t, q.PostSend(verbs.SendWR{Op: verbs.OpSend}), verbs.ErrInvalid, "%s QP PostSend", name)
		require.ErrorIs(t, q.PostRecv(verbs.RecvWR{}), verbs.ErrInvalid, "%s QP PostRecv", name)
		_, err := q.State()
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s QP State", name)
		require.ErrorIs(t, q.MoveToError(), verbs.ErrInvalid, "%s QP MoveToError", name)
		require.Equal(t, verbs.QPInfo{}, q.Info(), "%s QP Info", name)
		require.Zero(t, q.QPN(), "%s QP QPN", name)
	}
	for name, m := range map[string]*verbs.MR{"nil": nil, "zero": {}} {
		require.Zero(t, m.LKey()+m.RKey(), "%s MR keys", name)
		require.Zero(t, m.Addr(), "%s MR Addr", name)
		require.Zero(t, m.Len(), "%s MR Len", name)
		require.Empty(t, m.Via(), "%s MR Via", name)
	}
	for name, d := range map[string]*verbs.DM{"nil": nil, "zero": {}} {
		require.ErrorIs(t, d.CopyTo(0, make([]byte, 4)), verbs.ErrInvalid, "%s DM CopyTo", name)
		require.Zero(t, d.Len(), "%s DM Len", name)
	}
	for name, s := range map[string]*verbs.Soft{"nil": nil, "zero": {}} {
		require.ErrorIs(t, s.FailNth(verbs.FaultRegMR, 1), verbs.ErrInvalid, "%s Soft FailNth", name)
		_, err := s.SetDMCapacity(1024)
		require.ErrorIs(t, err, verbs.ErrInvalid, "%s Soft SetDMCapacity", name)
		require.ErrorIs(t, s.BreakQP(&verbs.QP{}), verbs.ErrInvalid, "%s Soft BreakQP", name)
	}
	var wc *verbs.WC
	require.ErrorIs(t, wc.Err(), verbs.ErrInvalid)
	var e *verbs.Error
	require.NotEmpty(t, e.Error())
}
