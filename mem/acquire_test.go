package mem_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestAcquireHoldsClose: while an Acquire is not released, Close refuses with
// ErrBusy and the buffer stays whole (its bytes, address and the live count); the
// last Release lets Close through. Acquire of a closed or nil buffer fails with
// ErrInvalid, and a Release without an Acquire changes nothing.
func TestAcquireHoldsClose(t *testing.T) {
	e := newEnv(t)
	for _, typ := range []mem.Type{mem.Host, mem.Sim, mem.DM} {
		t.Run(typ.String(), func(t *testing.T) {
			before := mem.Live()
			var b *mem.Buffer
			var err error
			if typ == mem.DM {
				b, err = mem.AllocFrom(mem.DM, e.dm, 64)
			} else {
				b, err = mem.Alloc(typ, 4096)
			}
			require.NoError(t, err)
			addr := b.Addr()
			b.Release() // none outstanding: nothing to undo
			require.NoError(t, b.Acquire())
			require.NoError(t, b.Acquire())
			for range 2 {
				err = b.Close()
				require.ErrorIs(t, err, mem.ErrBusy)
				require.ErrorContains(t, err, "acquired 2 time(s)")
				require.Equal(t, addr, b.Addr(), "still open")
				require.Equal(t, before+1, mem.Live())
			}
			b.Release()
			require.ErrorIs(t, b.Close(), mem.ErrBusy, "one Acquire still holds it")
			b.Release()
			require.NoError(t, b.Close())
			require.Equal(t, before, mem.Live())
			require.ErrorIs(t, b.Acquire(), mem.ErrInvalid, "closed")
			b.Release()
		})
	}
	var nilBuf *mem.Buffer
	require.ErrorIs(t, nilBuf.Acquire(), mem.ErrInvalid)
	nilBuf.Release()
}

// TestAcquireRacesClose: Acquire, Release and Close from many goroutines: while an
// Acquire is held the buffer's memory is there (Bytes is not nil), Close succeeds only
// in a moment that no Acquire holds, and every Acquire after it fails.
func TestAcquireRacesClose(t *testing.T) {
	b, err := mem.Alloc(mem.Host, 4096)
	require.NoError(t, err)
	var wg sync.WaitGroup
	var goneWhileHeld, acquired atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if b.Acquire() != nil {
					return // closed
				}
				acquired.Add(1)
				if b.Bytes() == nil {
					goneWhileHeld.Add(1)
				}
				b.Release()
			}
		}()
	}
	for acquired.Load() < 100 {
		runtime.Gosched() // let the holders start
	}
	busy := 0
	for {
		err := b.Close()
		if err == nil {
			break
		}
		require.ErrorIs(t, err, mem.ErrBusy)
		busy++
	}
	wg.Wait()
	require.Zero(t, goneWhileHeld.Load(), "memory released under an Acquire")
	require.ErrorIs(t, b.Acquire(), mem.ErrInvalid)
	t.Logf("%d acquisitions, %d refused closes", acquired.Load(), busy)
}

// TestZeroBufferAndStream: a zero Buffer (one Alloc did not make) refuses Close and
// Acquire with ErrInvalid and leaves Live alone (before, its Close counted a free that
// never happened, which hid a real leak from every leak check); a zero Stream works as
// NewStream's (before, a copy handed to its worker killed the process).
func TestZeroBufferAndStream(t *testing.T) {
	before := mem.Live()
	var z mem.Buffer
	require.ErrorIs(t, z.Close(), mem.ErrInvalid)
	require.ErrorIs(t, z.Acquire(), mem.ErrInvalid)
	require.Equal(t, before, mem.Live(), "a zero Buffer's Close changed Live")

	const n = 256 << 10 // past what a Stream copies inline: its worker runs
	src, err := mem.Alloc(mem.Host, n)
	require.NoError(t, err)
	defer src.Close()
	dst, err := mem.Alloc(mem.Host, n)
	require.NoError(t, err)
	defer dst.Close()
	testutil.Fill(testutil.Rand(t), src.Bytes())
	var s mem.Stream
	require.NoError(t, mem.CopyAsync(&s, dst, 0, src, 0, n))
	require.NoError(t, mem.CopyAsync(&s, dst, 0, src, 0, n))
	require.NoError(t, s.Synchronize())
	testutil.Equal(t, src.Bytes(), dst.Bytes(), "a zero Stream's copy")
	require.NoError(t, s.Close())
	var z2 mem.Stream
	require.NoError(t, z2.Synchronize(), "a zero Stream with nothing queued")
	require.NoError(t, z2.Close())
}
