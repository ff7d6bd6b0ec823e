package mem

import (
	"fmt"
	"syscall"
)

// DMABuf is a CUDA device allocation exported as a dma-buf file descriptor,
// the form in which ibv_reg_dmabuf_mr(3) takes device memory where no
// peer-memory kernel module is loaded. The descriptor covers whole pages from
// Base; the caller closes FD once the registration that needs it is made
// (the registration keeps its own reference).
type DMABuf struct {
	FD   int
	Base uintptr // device address at offset 0 of the descriptor
	Size int
}

// Offset is where addr lies in the descriptor.
func (d DMABuf) Offset(addr uintptr) int { return int(addr - d.Base) }

// ExportDMABuf exports the CUDA device allocation that holds [addr, addr+length).
// It fails with ErrNotSupported where the driver has no dma-buf export (before
// CUDA 11.7, or a kernel module without it), and with ErrInvalid for memory
// that is not CUDA device memory.
func ExportDMABuf(addr uintptr, length int) (DMABuf, error) {
	if addr == 0 {
		return DMABuf{}, fmt.Errorf("mem: ExportDMABuf: addr is 0: %w", ErrInvalid)
	}
	if length <= 0 {
		return DMABuf{}, fmt.Errorf("mem: ExportDMABuf: length must be > 0, got %d: %w", length, ErrInvalid)
	}
	if t := TypeOf(addr); t != CUDA {
		return DMABuf{}, fmt.Errorf("mem: ExportDMABuf: addr %#x is %s memory, not cuda: %w", addr, t, ErrInvalid)
	}
	fd, base, size, err := cudaDMABuf(addr)
	if err != nil {
		return DMABuf{}, fmt.Errorf("mem: ExportDMABuf: %w", err)
	}
	d := DMABuf{FD: fd, Base: base, Size: size}
	if addr < base || d.Offset(addr)+length > size {
		closeFD(fd)
		return DMABuf{}, fmt.Errorf("mem: ExportDMABuf: [%#x, +%d) is not inside the exported allocation [%#x, +%d): %w",
			addr, length, base, size, ErrInvalid)
	}
	return d, nil
}

func closeFD(fd int) { _ = syscall.Close(fd) }
