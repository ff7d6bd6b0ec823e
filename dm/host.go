package dm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapHost maps size bytes aligned to align for the host fallback. The
// memory is mmap'd rather than taken from the Go heap because the NIC
// reaches it through an MR for the pool's whole life, and MADV_DONTFORK
// keeps a fork from making the registered pages copy-on-write under it.
// raw is the whole mapping (for unmapHost), b the aligned bytes.
func mapHost(size, align int) (raw, b []byte, err error) {
	page := unix.Getpagesize()
	n := (size + page - 1) &^ (page - 1)
	extra := 0
	if align > page {
		extra = align // mmap only aligns to a page
	}
	raw, err = unix.Mmap(-1, 0, n+extra, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %d bytes: %w", n+extra, err)
	}
	if err := unix.Madvise(raw, unix.MADV_DONTFORK); err != nil {
		_ = unix.Munmap(raw)
		return nil, nil, fmt.Errorf("madvise MADV_DONTFORK: %w", err)
	}
	skip := int(-addrOf(raw) & uintptr(align-1))
	return raw, raw[skip : skip+size : skip+size], nil
}

func unmapHost(raw []byte) error {
	if raw == nil {
		return nil
	}
	if err := unix.Munmap(raw); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
