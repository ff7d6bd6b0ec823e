package mem_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// TestPinArguments holds Pin's refusals on every machine: only an open host buffer
// is pinned, and without CUDA the refusal says so instead of pretending.
func TestPinArguments(t *testing.T) {
	var nilBuf *mem.Buffer
	require.ErrorIs(t, nilBuf.Pin(), mem.ErrInvalid)
	require.False(t, nilBuf.Pinned())
	s, err := mem.Alloc(mem.Sim, 4096)
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.Pin(), mem.ErrInvalid)
	h, err := mem.Alloc(mem.Host, 4096)
	require.NoError(t, err)
	if !mem.CUDAAvailable() {
		require.ErrorIs(t, h.Pin(), mem.ErrNotSupported)
		require.False(t, h.Pinned())
	}
	require.NoError(t, h.Close())
	require.ErrorIs(t, h.Pin(), mem.ErrInvalid, "closed")
}

// TestCUDAPin pins host memory, copies through it both ways with random data, and
// closes it while pinned (Close unpins first).
func TestCUDAPin(t *testing.T) {
	requireCUDA(t)
	e := newEnv(t)
	const n = 3<<20 + 123
	h, data := e.randomized(mem.Host, n)
	require.NoError(t, h.Pin())
	require.NoError(t, h.Pin(), "a second Pin is a no-op")
	require.True(t, h.Pinned())
	d := e.alloc(mem.CUDA, n)
	require.NoError(t, mem.Copy(d, 0, h, 0, n))
	back := e.alloc(mem.Host, n)
	require.NoError(t, back.Pin())
	require.NoError(t, mem.Copy(back, 0, d, 0, n))
	requireSameBytes(t, data, back.Bytes())
	require.NoError(t, back.Close())
	require.False(t, back.Pinned())
}
