package dm_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/dm"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestConcurrentPartialWordWrites: copies into disjoint bytes of one 4-byte word of
// DM, at once from two goroutines, both land. Each is a read, patch and write back of
// the word; unserialized, one undid the other (a review found 20-126 of 2000 tries
// lost). The race detector cannot see this: DM is not Go memory.
func TestConcurrentPartialWordWrites(t *testing.T) {
	withSoftDMCapacity(t, verbs.DefaultSoftDMCapacity)
	ctx, pd := openPD(t, verbs.SoftDeviceName)
	p := newPool(t, ctx, pd, dm.Config{Capacity: 4096})
	require.Equal(t, dm.KindDM, p.Kind())
	c := alloc(t, p, 64)
	rnd := testutil.Rand(t)
	lost := 0
	for try := 0; try < 2000; try++ {
		a, b := byte(rnd.Uint32()|1), byte(rnd.Uint32()|1)
		require.NoError(t, c.CopyTo(0, []byte{0, 0, 0, 0}))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); require.NoError(t, c.CopyTo(1, []byte{a})) }()
		go func() { defer wg.Done(); require.NoError(t, c.CopyTo(2, []byte{b})) }()
		wg.Wait()
		got := make([]byte, 4)
		require.NoError(t, c.CopyFrom(got, 0))
		if got[1] != a || got[2] != b {
			lost++
		}
	}
	require.Zero(t, lost, "writes to disjoint bytes of one word lost in %d of 2000 tries", lost)
}

// TestBufferOwnsItsChunk: the chunk behind a DM mem.Buffer closes only with the
// Buffer. Its own Close refuses, so that a holder of the Region cannot free memory
// that a collective request holds (Buffer.Close refuses then), and the pool cannot hand
// the bytes to the next Alloc while a peer still writes them (a review's reproducer: a
// gather's block landed in another buffer).
func TestBufferOwnsItsChunk(t *testing.T) {
	withSoftDMCapacity(t, verbs.DefaultSoftDMCapacity)
	ctx, pd := openPD(t, verbs.SoftDeviceName)
	p := newPool(t, ctx, pd, dm.Config{Capacity: 4096})
	b, err := mem.AllocFrom(mem.DM, p, 64)
	require.NoError(t, err)
	require.NoError(t, b.Acquire())
	err = b.Region().Close()
	require.ErrorIs(t, err, verbs.ErrInvalid)
	require.ErrorContains(t, err, "belongs to a mem.Buffer")
	data := []byte("still mine")
	require.NoError(t, b.Region().CopyTo(0, data), "the chunk is still open")
	other, err := mem.AllocFrom(mem.DM, p, 64)
	require.NoError(t, err)
	require.NotEqual(t, b.Addr(), other.Addr(), "the pool handed out the held chunk's bytes again")
	require.NoError(t, other.Close())
	require.ErrorIs(t, b.Close(), mem.ErrBusy, "held by a request")
	b.Release()
	require.NoError(t, b.Close())
	require.Nil(t, b.Region())
	require.NoError(t, p.Close(), "every chunk went back to the pool")

	// A chunk that no Buffer took closes by itself, as before.
	p2 := newPool(t, ctx, pd, dm.Config{Capacity: 4096})
	c, err := p2.AllocChunk(16)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, p2.Close())
}

// TestPoolCloseFailedFreeRefusesAlloc: a pool whose Close deregistered its MR and then
// failed to free its memory stays open for a retry, and hands out nothing meanwhile (a
// chunk of it would have had no keys: before, it allocated as if nothing happened);
// the retried Close frees everything.
func TestPoolCloseFailedFreeRefusesAlloc(t *testing.T) {
	withSoftDMCapacity(t, verbs.DefaultSoftDMCapacity)
	ctx, pd := openPD(t, verbs.SoftDeviceName)
	p, err := dm.NewPool(ctx, pd, dm.Config{Capacity: 4096})
	require.NoError(t, err)
	require.Equal(t, dm.KindDM, p.Kind())
	require.NoError(t, softControl(t, ctx).FailNth(verbs.FaultFreeDM, 1))
	err = p.Close()
	require.ErrorIs(t, err, verbs.ErrInjected, "the injected free failure never fired")
	_, err = p.AllocChunk(64)
	require.ErrorIs(t, err, verbs.ErrClosed)
	require.ErrorContains(t, err, "pool is closing")
	require.NoError(t, p.Close(), "the retry")
	requireNoDM(t)
}

// TestLargestBlockKeptWhenProbeFreeFails: probing for the largest free block gives a
// block that fits back before it tries a larger one; where that free fails, the block
// is still held, and the pool keeps it (64 KiB of the 100 KiB free) rather than fail
// and lose it (before, NewPool failed and the block stayed allocated for good).
func TestLargestBlockKeptWhenProbeFreeFails(t *testing.T) {
	const ki = 1 << 10
	withSoftDMCapacity(t, 256*ki)
	ctx, pd := openPD(t, verbs.SoftDeviceName)
	other, err := ctx.AllocDM(156 * ki)
	require.NoError(t, err)
	require.NoError(t, softControl(t, ctx).FailNth(verbs.FaultFreeDM, 1))
	p, err := dm.NewPool(ctx, pd, dm.Config{})
	require.NoError(t, err)
	require.Equal(t, 64*ki, p.Capacity(), "the block held when its free failed")
	c, err := p.AllocChunk(64 * ki)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, p.Close())
	require.NoError(t, other.Close())
	requireNoDM(t)
}
