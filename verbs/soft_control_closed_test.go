package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/verbs"
)

// TestSoftAfterContextClose: every method of Soft fails with ErrClosed once its
// context is closed, as its doc says; the counters Pulled and Streamed answered 0
// and no error (found by a review).
func TestSoftAfterContextClose(t *testing.T) {
	c, err := verbs.Open(verbs.SoftDeviceName)
	require.NoError(t, err)
	s, err := verbs.SoftControl(c)
	require.NoError(t, err)
	pd, err := c.AllocPD()
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	require.NoError(t, err)
	_, err = s.Pulled(mr)
	require.NoError(t, err, "while open")
	require.NoError(t, mr.Close())
	require.NoError(t, pd.Close())
	require.NoError(t, c.Close())
	_, err = s.Pulled(mr)
	require.ErrorIs(t, err, verbs.ErrClosed)
	_, err = s.Streamed(mr)
	require.ErrorIs(t, err, verbs.ErrClosed)
	require.ErrorIs(t, s.FailNth(verbs.FaultRegMR, 1), verbs.ErrClosed)
}
