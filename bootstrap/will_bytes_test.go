package bootstrap

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWillsCountAgainstMaxBytes: a will's key and value count against MaxBytes with
// the data's, as the package doc promises for whatever peers send: wills beyond the
// limit are refused with ErrStoreFull, a withdrawn will gives its bytes back, and so
// do the wills of a connection that ended (set, then deleted here). Before, each
// connection could hold MaxWills wills of MaxValueSize each beyond the limit (found
// by a review).
func TestWillsCountAgainstMaxBytes(t *testing.T) {
	const kib = 1 << 10
	s := newServer(t, ServerOptions{MaxBytes: 64 * kib, MaxValueSize: 64 * kib})
	ctx := testCtx(t, 30*time.Second)
	c := dial(t, s, ClientOptions{})
	big := make([]byte, 20*kib)
	require.NoError(t, c.Will(ctx, "w1", big))
	require.NoError(t, c.Will(ctx, "w2", big))
	require.NoError(t, c.Will(ctx, "w3", big))
	require.ErrorIs(t, c.Will(ctx, "w4", big), ErrStoreFull, "a will past MaxBytes")
	require.ErrorIs(t, c.Set(ctx, "k", big), ErrStoreFull, "data past MaxBytes with the wills")
	require.NoError(t, c.Will(ctx, "w3", nil), "withdrawn")
	require.NoError(t, c.Set(ctx, "k", big), "the withdrawn will's bytes are free")
	_, err := c.Delete(ctx, "k")
	require.NoError(t, err)

	// A connection that ends: its wills are set (and count as data then).
	d := dial(t, s, ClientOptions{})
	require.NoError(t, c.Will(ctx, "w1", nil))
	require.NoError(t, c.Will(ctx, "w2", nil))
	require.NoError(t, d.Will(ctx, "dw", big))
	s.mu.Lock()
	held := s.willBytes
	s.mu.Unlock()
	require.EqualValues(t, len("dw")+len(big), held)
	d.fail(errors.New("test: the process died")) // drops the connection as a dying process's does
	require.NoError(t, c.Wait(ctx, "dw"), "the ended connection's will was set")
	s.mu.Lock()
	held = s.willBytes
	s.mu.Unlock()
	require.Zero(t, held, "the set will no longer counts as a will")
}
