package mem_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

func newStream(t testing.TB) *mem.Stream {
	s, err := mem.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// Copies on one stream run in queue order: each step here reads what the
// step before wrote.
func TestStreamOrder(t *testing.T) {
	testStreamChain(t, copyTypes(false))
}

func testStreamChain(t *testing.T, types []mem.Type) {
	e := newEnv(t)
	s := newStream(t)
	const n = 3<<20 + 1
	first, data := e.randomized(mem.Host, n)
	prev := first
	for round := 0; round < 3; round++ {
		for _, typ := range types {
			next := e.alloc(typ, n)
			require.NoError(t, mem.CopyAsync(s, next, 0, prev, 0, n))
			prev = next
		}
	}
	last := e.alloc(mem.Host, n)
	require.NoError(t, mem.CopyAsync(s, last, 0, prev, 0, n))
	require.NoError(t, s.Synchronize())
	requireSameBytes(t, data, last.Bytes())
}

func TestStreamConcurrent(t *testing.T) {
	e := newEnv(t)
	s := newStream(t)
	// Chunks alternate between sizes that CopyAsync makes itself and sizes it
	// queues for the worker.
	const workers, n, small, large = 8, 1 << 20, 4096, 124 << 10
	srcs := make([]*mem.Buffer, workers)
	dsts := make([]*mem.Buffer, workers)
	data := make([][]byte, workers)
	for i := range srcs {
		srcs[i], data[i] = e.randomized(mem.Sim, n)
		dsts[i] = e.alloc(mem.Host, n)
	}
	var wg sync.WaitGroup
	for i := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off, c := 0, small; off < n; off, c = off+c, small+large-c {
				c = min(c, n-off)
				require.NoError(t, mem.CopyAsync(s, dsts[i], off, srcs[i], off, c))
			}
		}()
	}
	wg.Wait()
	require.NoError(t, s.Synchronize())
	for i := range dsts {
		requireSameBytes(t, data[i], dsts[i].Bytes())
	}
}

// A failed copy is reported once, by the next Synchronize, and the stream
// goes on working.
func TestStreamError(t *testing.T) {
	e := newEnv(t)
	s := newStream(t)
	h, data := e.randomized(mem.Host, 4096)
	d := e.alloc(mem.DM, 4096)
	boom := fmt.Errorf("injected")
	e.dm.fail(boom)
	require.NoError(t, mem.CopyAsync(s, d, 0, h, 0, 4096))
	require.NoError(t, mem.CopyAsync(s, h, 0, d, 0, 4096))
	require.ErrorIs(t, s.Synchronize(), boom)
	e.dm.fail(nil)
	require.NoError(t, s.Synchronize())
	require.NoError(t, mem.CopyAsync(s, d, 0, h, 0, 4096))
	require.NoError(t, s.Synchronize())
	requireSameBytes(t, data, e.read(d))
}

func TestStreamArgs(t *testing.T) {
	e := newEnv(t)
	h := e.alloc(mem.Host, 64)
	require.ErrorIs(t, mem.CopyAsync(nil, h, 0, h, 0, 1), mem.ErrInvalid)
	s, err := mem.NewStream()
	require.NoError(t, err)
	require.ErrorContains(t, mem.CopyAsync(s, h, 0, h, 1, 64), "srcOff 1 + n 64")
	require.NoError(t, mem.CopyAsync(s, h, 0, h, 0, 0))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.ErrorContains(t, mem.CopyAsync(s, h, 0, h, 32, 32), "stream is closed")
	var nilStream *mem.Stream
	require.NoError(t, nilStream.Close())
}
