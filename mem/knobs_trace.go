//go:build ibcoll_stagetrace

package mem

import (
	"os"
	"strconv"
	"time"
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
	gpuIssueOnWorker = os.Getenv("IBCOLL_X_GPU_WORKER") == "1"
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_COPY_SPIN")); err == nil && v > 0 {
		spinFixed = time.Duration(v) * time.Microsecond
	}
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_COPY_NAP")); err == nil && v > 0 {
		setCopyNap(time.Duration(v) * time.Microsecond)
	}
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_SMALL_COPY")); err == nil && v >= 0 {
		smallCopyFixed = v
	}
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_COPY_TURN")); err == nil && v >= 0 {
		copyTurnMin = v
	}
}
