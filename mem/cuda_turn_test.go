package mem_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// TestCUDACopyTurn: with the copy turn on (the default: mem's copyTurnMin), eight
// goroutines (ranks sharing a GPU) copy from the device at once, into pinned
// host buffers and into Go slices, at sizes on both sides of the turn's bound. Every
// copy's bytes are checked against the source's, and the turn's counter must say that
// exactly the copies to host memory at or above the bound took it, and no copy between
// device buffers (each goroutine also copies its source to a second device buffer,
// and reads that back): one queue whose waiters check a
// shared flag must not release a waiter before its own copy is done.
func TestCUDACopyTurn(t *testing.T) {
	requireCUDA(t)
	const turn = 256 << 10
	mem.SetCopyTurn(turn)
	defer mem.SetCopyTurn(mem.CopyTurnMin())
	e := newEnv(t)
	const k, rounds, size = 8, 10, 2<<20 + 3
	sizes := []int{4 << 10, turn - 1, turn, 1<<20 + 7, size}
	big := 0
	for _, n := range sizes {
		if n >= turn {
			big++
		}
	}
	type rank struct {
		src    *mem.Buffer
		data   []byte
		pinned *mem.Buffer // nil: copy into Go slices
		dev    *mem.Buffer // the device-to-device copy's destination
	}
	ranks := make([]rank, k)
	for i := range ranks {
		ranks[i].src, ranks[i].data = e.randomized(mem.CUDA, size)
		ranks[i].dev = e.alloc(mem.CUDA, size)
		if i%2 == 0 {
			ranks[i].pinned = e.alloc(mem.Host, size)
			require.NoError(t, ranks[i].pinned.Pin())
		}
	}
	before := mem.CUDATurned()
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range ranks {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rk := ranks[i]
			for r := range rounds {
				for _, n := range sizes {
					off := (r*7919 + i*131) % (size - n + 1)
					var got []byte
					var err error
					if rk.pinned != nil {
						got = rk.pinned.Bytes()[:n]
						clear(got)
						err = mem.CopyPtr(rk.pinned.Addr(), mem.Host, rk.src.Addr()+uintptr(off), mem.CUDA, n)
					} else {
						got, err = readPtr(rk.src.Addr()+uintptr(off), mem.CUDA, n)
					}
					if err != nil {
						errs[i] = err
						return
					}
					if !bytes.Equal(got, rk.data[off:off+n]) {
						errs[i] = fmt.Errorf("goroutine %d, round %d: %d bytes from offset %d differ from the source", i, r, n, off)
						return
					}
				}
				// Device to device: not the turn's (the read back is, and counts).
				if err := mem.CopyPtr(rk.dev.Addr(), mem.CUDA, rk.src.Addr(), mem.CUDA, size); err != nil {
					errs[i] = err
					return
				}
				got, err := readPtr(rk.dev.Addr(), mem.CUDA, size)
				if err != nil {
					errs[i] = err
					return
				}
				if !bytes.Equal(got, rk.data) {
					errs[i] = fmt.Errorf("goroutine %d, round %d: a device-to-device copy of %d bytes differs from its source", i, r, size)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, uint64(k*rounds*(big+1)), mem.CUDATurned()-before,
		"copies from the device to host memory of at least %d bytes that did not take the turn, or smaller ones or copies between device buffers that did", turn)
}
