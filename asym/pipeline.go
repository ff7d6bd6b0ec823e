package asym

import (
	"sync/atomic"

	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
)

// The copy-in of a large source in memory the CPU cannot simply read (CUDA, sim, DM) runs beside the transport instead of
// before it: a goroutine copies the planned spans in chunks, in increasing offset
// order, and publishes how far it got; the transport asks Ready before it reads a
// range of the scratch, so the first blocks go on the wire while later ones are still
// being copied in. Complete waits for the goroutine, so no copy outlives the post.

const (
	// DefaultPipelineMin is the smallest copy-in (the bytes of its spans) that is
	// pipelined: below it, one copy costs less than the transport's waiting for it.
	DefaultPipelineMin = 1 << 20
)

// pipeChunk is the largest step of the copy-in: large enough for the copy engine's
// full speed (a copy call costs about 10 µs). A variable only so that a diagnosis
// build (trace_on.go) can set it; pipeChunkFixed then says every step takes it.
var (
	pipeChunk      = 4 << 20
	pipeChunkFixed = false
)

// pipeChunkMin is the smallest step. The transport sends each landing piece of a
// block whose bytes are in place (tlmlx5's readyWRs), so a source copied in quarters
// puts its first piece on the wire after a quarter of the copy instead of all of it;
// but steps of 256 KiB (a 1 MiB block's pieces) made an 8-rank 1 MiB gather cuda,cuda
// on one H100 slower (599 → 803 µs, 879 against 708 with 4 MiB steps in one build):
// eight ranks' copy-ins each paid four synchronous driver calls instead of one.
// Sessions 18 and 21 had found steps of 512 KiB to 1 MiB slower for a 4 MiB scatter
// cuda,host, whose 32 MiB source now goes in 4 MiB steps as it did then; of what the
// floor changes (sources of 2 to 16 MiB), an 8-rank gather of 4 MiB blocks and a
// scatter of 1 MiB blocks measured within the noise of the old steps in one lease, but
// the final version's run put the 4 MiB gather cuda,host 10-18% slower (docs/design.md,
// "Copy-in beside the wire").
const pipeChunkMin = 1 << 20

// pipeChunkFor is the step of the copy-in of n bytes (the spans copied in, not the
// extent with its gaps): about a quarter of them in whole MiB, within
// [pipeChunkMin, pipeChunk], so that the first quarter goes on the wire while
// the other three are copied, and a large source still moves in the copy engine's
// long steps.
func pipeChunkFor(n int) int {
	if pipeChunkFixed {
		return pipeChunk
	}
	return min(pipeChunk, max(pipeChunkMin, n/4/pipeChunkMin*pipeChunkMin))
}

// copyIn is one post's pipelined copy-in.
type copyIn struct {
	ready atomic.Int64 // scratch bytes [0, ready) that copy in are in place
	err   error        // set before done is closed
	done  chan struct{}
	// settled is set by the first CopyingIn that finds the copy ended: that call
	// still says true, so its waiter polls once more and the operations the end
	// released go ahead, instead of the waiter sleeping on a transport that has
	// nothing left to report.
	settled atomic.Bool
	tr      copyInTrace // the steps' ends, in diagnosis builds (trace_on.go)
}

// pipelined reports whether this side's copy-in runs beside the transport.
func (sd *side) pipelined() bool {
	return sd.pipeMin > 0 && sd.scratch != nil && sd.plan.CopyIn && sd.user.Type != mem.Host && sd.copyInBytes() >= sd.pipeMin
}

// copyInBytes is what a copy-in of this side moves: its spans, without the gaps of a
// v-layout's extent.
func (sd *side) copyInBytes() int {
	n := 0
	for _, sp := range sd.plan.Spans {
		n += sp.Len
	}
	return n
}

// startCopyIn begins the pipelined copy-in of one post; the fault check stays
// synchronous, so an injected copy-in fault fails the post before anything starts.
func (sd *side) startCopyIn(f *fault.Set, copied *atomic.Int64) (*copyIn, error) {
	if err := f.Hit(fault.CopyIn); err != nil {
		return nil, sd.copyError(true, err)
	}
	ci := &copyIn{done: make(chan struct{})}
	spans := sd.plan.Spans
	chunk := pipeChunkFor(sd.copyInBytes())
	go func() {
		defer close(ci.done)
		for _, sp := range spans {
			for off := sp.Off; off < sp.Off+sp.Len; off += chunk {
				n := min(chunk, sp.Off+sp.Len-off)
				if err := sd.copyRange(true, off, n); err != nil {
					ci.err = sd.copyError(true, err)
					return
				}
				copied.Add(int64(n))
				ci.ready.Store(int64(off + n))
				ci.tr.step(off, n)
			}
		}
		ci.ready.Store(int64(sd.plan.Bytes))
	}()
	return ci, nil
}

// WithPipelineMin sets the smallest source (in bytes) whose copy-in runs beside the
// transport instead of before it: DefaultPipelineMin when n is 0, never when n is
// negative. Only sources in memory other than host are copied in at all.
func WithPipelineMin(n int) Option {
	return func(o *options) {
		switch {
		case n > 0:
			o.pipeMin = n
		case n < 0:
			o.pipeMin = 0
		}
	}
}

// Ready reports whether source bytes [off, off+n) of the post in flight are in the
// scratch, so that the transport may read them. A pipelined copy-in that failed
// returns its error, which must fail the post; a source that is not pipelined is
// always ready.
func (s *Stage) Ready(off, n int) (bool, error) {
	if s == nil {
		return false, invalid("Ready: nil Stage")
	}
	ci := s.pipe.Load()
	if ci == nil {
		return true, nil
	}
	if ci.ready.Load() >= int64(off+n) {
		return true, nil
	}
	select {
	case <-ci.done:
		if ci.err != nil {
			return false, ci.err
		}
		return true, nil
	default:
		return false, nil
	}
}

// CopyingIn reports whether the waiter of the post must poll rather than sleep on the
// transport, since the end of a pipelined copy-in is no transport event: while the
// copy runs, and once more after it ended, for the poll that lets the operations
// waiting for its last bytes go ahead (the copy may end between that waiter's last
// poll and this call).
func (s *Stage) CopyingIn() bool {
	if s == nil {
		return false
	}
	ci := s.pipe.Load()
	if ci == nil {
		return false
	}
	select {
	case <-ci.done:
		return !ci.settled.Swap(true)
	default:
		return true
	}
}

// joinCopyIn waits for a pipelined copy-in and returns its error.
func (s *Stage) joinCopyIn() error {
	ci := s.pipe.Swap(nil)
	if ci == nil {
		return nil
	}
	<-ci.done
	s.tr.copyIn(&ci.tr)
	return ci.err
}

// copyRange copies [off, off+n) between the user's buffer and the scratch.
func (sd *side) copyRange(in bool, off, n int) error {
	u, sc := sd.user, sd.scratch
	switch {
	case u.Buf != nil && in:
		return mem.Copy(sc, off, u.Buf, off, n)
	case u.Buf != nil:
		return mem.Copy(u.Buf, off, sc, off, n)
	case in:
		return mem.CopyPtr(sc.Addr()+uintptr(off), sc.Type(), u.Addr+uintptr(off), u.Type, n)
	}
	return mem.CopyPtr(u.Addr+uintptr(off), u.Type, sc.Addr()+uintptr(off), sc.Type(), n)
}
