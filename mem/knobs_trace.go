//go:build ibcoll_stagetrace

package mem

import (
	"time"

	"github.com/ibcoll/ibcoll/internal/xknob"
)

// The diagnosis build (asym's stage trace) takes gpuIssueOnWorker from the
// environment (IBCOLL_X_GPU_WORKER=1), spinFixed (IBCOLL_X_COPY_SPIN, µs: how long
// every wait for the GPU spins before it sleeps) and the copy nap (IBCOLL_X_COPY_NAP,
// µs: past its spin, a wait polls the stream's flag between naps of that length
// instead of sleeping on the event) and smallCopyFixed (IBCOLL_X_SMALL_COPY, bytes: the
// largest synchronous copy on the thread's own stream; 0 puts every one on the legacy
// stream) and copyTurnMin (IBCOLL_X_COPY_TURN, bytes: synchronous copies from the
// device to host memory of at least that many go to one queue of the process, in turn;
// 0 turns the turn off), for experiments on a GPU machine.
func init() {
	gpuIssueOnWorker = xknob.Bool("IBCOLL_X_GPU_WORKER")
	if v, ok := xknob.Int("IBCOLL_X_COPY_SPIN", 1); ok {
		spinFixed = time.Duration(v) * time.Microsecond
	}
	if v, ok := xknob.Int("IBCOLL_X_COPY_NAP", 1); ok {
		setCopyNap(time.Duration(v) * time.Microsecond)
	}
	if v, ok := xknob.Int("IBCOLL_X_SMALL_COPY", 0); ok {
		smallCopyFixed = v
	}
	if v, ok := xknob.Int("IBCOLL_X_COPY_TURN", 0); ok {
		copyTurnMin = v
	}
}
