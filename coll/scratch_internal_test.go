package coll

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// countingReg is a transport's registrar that counts registrations and checks that
// each is closed before its buffer is freed.
type countingReg struct {
	t       *testing.T
	made    int
	live    map[*mem.Buffer]bool
	failOff bool // the next deregistration fails
}

func (c *countingReg) Register(b *mem.Buffer) (io.Closer, error) {
	c.made++
	c.live[b] = true
	return regCloser{c, b}, nil
}

type regCloser struct {
	c *countingReg
	b *mem.Buffer
}

func (r regCloser) Close() error {
	require.NotZero(r.c.t, r.b.Addr(), "the buffer was freed before its registration")
	if r.c.failOff {
		r.c.failOff = false
		return errors.New("injected deregistration failure")
	}
	delete(r.c.live, r.b)
	return nil
}

// TestScratchKeepsRegistration: a cached scratch is registered once however often it
// is reused; a buffer the cache does not keep, the one it drops for a bigger pinned one,
// and every kept one at dropRegs are deregistered before they are freed; a failed
// deregistration keeps buffer and registration for a retry.
func TestScratchKeepsRegistration(t *testing.T) {
	reg := &countingReg{t: t, live: map[*mem.Buffer]bool{}}
	c := &scratchCache{idle: map[scratchKey][]*mem.Buffer{}, limit: 1 << 20}
	for i := range 5 {
		b, err := c.alloc(mem.Host, 4096)
		require.NoError(t, err)
		r, err := c.register(reg, b)
		require.NoError(t, err)
		require.NoError(t, r.Close(), "post %d", i)
		require.NoError(t, c.free(b))
	}
	require.Equal(t, 1, reg.made, "one registration for five uses of one cached buffer")
	require.Len(t, reg.live, 1)

	// Over the limit: not kept, so deregistered, then freed.
	big, err := c.alloc(mem.Host, 2<<20)
	require.NoError(t, err)
	_, err = c.register(reg, big)
	require.NoError(t, err)
	require.NoError(t, c.free(big))
	require.False(t, reg.live[big], "a buffer the cache does not keep keeps no registration")
	require.Zero(t, big.Addr(), "and is freed")

	// A failed deregistration keeps both; the retry frees them.
	b2, err := c.alloc(mem.Host, 2<<20)
	require.NoError(t, err)
	_, err = c.register(reg, b2)
	require.NoError(t, err)
	reg.failOff = true
	require.Error(t, c.free(b2))
	require.NotZero(t, b2.Addr(), "kept after the failed deregistration")
	require.True(t, reg.live[b2])
	require.NoError(t, c.release(b2))
	require.Zero(t, b2.Addr())

	// Team.Close: registrations go first, the buffers after.
	reg.failOff = true
	require.Error(t, c.dropRegs())
	require.Len(t, reg.live, 1, "the failed one stays for the retry")
	require.NoError(t, c.dropRegs())
	require.Empty(t, reg.live)
	require.NoError(t, c.close())
	require.Empty(t, c.regs)
}
