package mem

import (
	"fmt"
	"math"
	"sync"

	"github.com/ibcoll/ibcoll/internal/errs"
)

// CUDADeviceEnv names the environment variable that programs map to UseCUDADevice
// (coll.ConfigFromEnv reads it); this package reads no environment.
const CUDADeviceEnv = "IBCOLL_CUDA_DEVICE"

// cudaDevice is the device ordinal CUDA memory uses; fixed once the driver's context
// is set up, which happens once per process.
var cudaDevice struct {
	sync.Mutex
	ordinal int
	fixed   bool // chosen by UseCUDADevice, or in use
}

// UseCUDADevice selects the CUDA device (by ordinal) that CUDA and managed memory of
// this process use; the default is device 0. The first choice holds for the process:
// a later call (or one after CUDA's first use, which fixes device 0 when none was
// chosen) succeeds only with the same ordinal, and fails with an error wrapping
// ErrBusy otherwise. A device that is not there shows when CUDA is first used: CUDA
// memory is then unavailable (ErrNotSupported), with the reason.
func UseCUDADevice(ordinal int) error {
	if ordinal < 0 || ordinal > math.MaxInt32 {
		// The driver takes an int: a larger ordinal would wrap to another device.
		return fmt.Errorf("mem: UseCUDADevice: ordinal %d is not from 0 to %d: %w", ordinal, math.MaxInt32, ErrInvalid)
	}
	cudaDevice.Lock()
	defer cudaDevice.Unlock()
	if cudaDevice.fixed && cudaDevice.ordinal != ordinal {
		return fmt.Errorf("mem: UseCUDADevice(%d): this process already uses CUDA device %d: %w",
			ordinal, cudaDevice.ordinal, errs.ErrBusy)
	}
	cudaDevice.ordinal, cudaDevice.fixed = ordinal, true
	return nil
}

// cudaOrdinal fixes and returns the device ordinal, at CUDA's first use.
func cudaOrdinal() int {
	cudaDevice.Lock()
	defer cudaDevice.Unlock()
	cudaDevice.fixed = true
	return cudaDevice.ordinal
}
