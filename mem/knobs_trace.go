//go:build ibcoll_stagetrace

package mem

import "os"

// The diagnosis build (asym's stage trace) takes gpuIssueOnWorker from the
// environment (IBCOLL_X_GPU_WORKER=1), for experiments on a GPU machine.
func init() {
	gpuIssueOnWorker = os.Getenv("IBCOLL_X_GPU_WORKER") == "1"
}
