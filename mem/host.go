package mem

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mmapHost maps anonymous pages rather than using the Go heap: the memory
// may be registered with a NIC for longer than any call, so it must never be
// moved or freed by the collector, and MADV_DONTFORK keeps a fork from
// turning registered pages copy-on-write under the NIC.
func mmapHost(size int) ([]byte, error) {
	m, err := unix.Mmap(-1, 0, roundPage(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	if err := unix.Madvise(m, unix.MADV_DONTFORK); err != nil {
		_ = unix.Munmap(m)
		return nil, fmt.Errorf("madvise MADV_DONTFORK: %w", err)
	}
	return m, nil
}

func allocHost(size int) (*Buffer, error) {
	m, err := mmapHost(size)
	if err != nil {
		return nil, fmt.Errorf("mem: alloc host: %w", err)
	}
	return &Buffer{typ: Host, addr: addrOf(m), size: size, mapping: m}, nil
}

func munmap(m []byte) error {
	if m == nil {
		return nil
	}
	return unix.Munmap(m)
}

var pageSize = unix.Getpagesize()

func roundPage(n int) int { return (n + pageSize - 1) &^ (pageSize - 1) }
