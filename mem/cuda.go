package mem

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// CUDAError is a failed CUDA driver call. It matches unix.ENOMEM for
// CUDA_ERROR_OUT_OF_MEMORY, ErrInvalid for CUDA_ERROR_INVALID_VALUE, and
// ErrNotSupported for CUDA_ERROR_NO_DEVICE and CUDA_ERROR_NOT_SUPPORTED, so
// callers test for causes without knowing CUDA codes.
type CUDAError struct {
	Func string // the driver entry point, e.g. "cuMemAlloc_v2"
	Code int    // the CUresult
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"; empty if the driver has none
}

func (e *CUDAError) Error() string {
	name := e.Name
	if name == "" {
		name = "CUresult"
	}
	return fmt.Sprintf("%s: %s (%d)", e.Func, name, e.Code)
}

// CUresult values, part of the driver's ABI.
const (
	cuErrInvalidValue = 1
	cuErrOutOfMemory  = 2
	cuErrNoDevice     = 100
	cuErrNotSupported = 801
)

func (e *CUDAError) Is(target error) bool {
	switch target {
	case unix.ENOMEM:
		return e.Code == cuErrOutOfMemory
	case ErrInvalid:
		return e.Code == cuErrInvalidValue
	case ErrNotSupported:
		return e.Code == cuErrNoDevice || e.Code == cuErrNotSupported
	}
	return false
}

func allocCUDA(t Type, size int) (*Buffer, error) {
	p, err := cudaAlloc(size, t == CUDAManaged)
	if err != nil {
		return nil, fmt.Errorf("mem: alloc %s: %w", t, err)
	}
	return &Buffer{typ: t, addr: p, size: size}, nil
}
