//go:build !cgo

package mem

import (
	"fmt"
	"time"
)

var errNoCgo = fmt.Errorf("cuda: built without cgo: %w", ErrNotSupported)

func cudaInit() error { return errNoCgo }

// CUDAAvailable reports whether libcuda loaded, initialised, and has the
// device to use; never in a build without cgo.
func CUDAAvailable() bool { return false }

func cudaAlloc(int, bool) (uintptr, error) { return 0, errNoCgo }
func cudaFree(uintptr) error               { return errNoCgo }
func cudaMemcpy(uintptr, uintptr, int, bool, bool) error {
	return fmt.Errorf("mem: copy: %w", errNoCgo)
}
func cudaPointerType(uintptr) (Type, bool)                        { return Host, false }
func cudaHostRegister(uintptr, int, bool) error                   { return errNoCgo }
func cudaDMABuf(uintptr) (int, uintptr, int, error)               { return -1, 0, 0, errNoCgo }
func cudaStreamCreate() (cuStream, error)                         { return cuStream{}, fmt.Errorf("mem: stream: %w", errNoCgo) }
func cudaStreamDestroy(cuStream) error                            { return errNoCgo }
func cudaStreamWait(cuStream, int) error                          { return errNoCgo }
func cudaMemcpyAsync(cuStream, uintptr, uintptr, int, bool) error { return errNoCgo }
func cudaMemcpy2DAsync(cuStream, uintptr, uintptr, int, int, int, bool) error {
	return errNoCgo
}

func setCUDAWaitFlag(bool) {}

func setCopyNap(time.Duration) {}

func setCopyTurn(int) {}

type cuStream struct{}

func (cuStream) valid() bool { return false }
func cudaBounced() uint64    { return 0 }
func cudaTurned() uint64     { return 0 }

func cudaGDRInfo() (GPUDirectOrdering, error) { return GPUDirectOrdering{Ordering: -1}, errNoCgo }
func cudaGDRFlush() error                     { return errNoCgo }
