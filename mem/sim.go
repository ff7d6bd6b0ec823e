package mem

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// Sim memory is one memfd mapped twice. The PROT_NONE mapping gives the
// buffer an address that behaves like a device pointer: the CPU faults on
// any access, so a path that forgets to stage sim memory and reads or
// registers it itself crashes in tests instead of passing by accident. The
// read-write mapping, MAP_SHARED so that both see the same pages, is used only
// by this package's copies, which take sim addresses as a CUDA copy takes
// device pointers: a path that moves the buffer only through them (tlmlx5's
// eager sends copy small messages so) works unstaged, and shows nothing.

type simRange struct {
	start, end uintptr // the whole PROT_NONE mapping
	b          *Buffer
}

// simRegistry is sorted by start. TypeOf and CopyPtr look up interior
// pointers in it, so a plain map keyed by base address would not do.
var simRegistry struct {
	sync.RWMutex
	ranges []simRange
}

func allocSim(size int) (*Buffer, error) {
	fd, err := unix.MemfdCreate("ibcoll-sim", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("mem: alloc sim: memfd_create: %w", err)
	}
	// The mappings keep the file alive; the descriptor is not needed after.
	defer unix.Close(fd)
	n := roundPage(size)
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		return nil, fmt.Errorf("mem: alloc sim: ftruncate %d bytes: %w", n, err)
	}
	dev, err := unix.Mmap(fd, 0, n, unix.PROT_NONE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mem: alloc sim: mmap PROT_NONE: %w", err)
	}
	alias, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Munmap(dev)
		return nil, fmt.Errorf("mem: alloc sim: mmap alias: %w", err)
	}
	b := &Buffer{typ: Sim, addr: addrOf(dev), size: size, mapping: dev, alias: alias}
	r := simRange{start: b.addr, end: b.addr + uintptr(n), b: b}
	simRegistry.Lock()
	i, _ := slices.BinarySearchFunc(simRegistry.ranges, r.start, func(e simRange, a uintptr) int {
		return cmpAddr(e.start, a)
	})
	simRegistry.ranges = slices.Insert(simRegistry.ranges, i, r)
	simRegistry.Unlock()
	return b, nil
}

// freeSim drops the range from the registry before unmapping, so that an
// address the kernel hands out again is never reported as sim.
func freeSim(b *Buffer) error {
	simRegistry.Lock()
	simRegistry.ranges = slices.DeleteFunc(simRegistry.ranges, func(e simRange) bool { return e.b == b })
	simRegistry.Unlock()
	return errors.Join(munmap(b.mapping), munmap(b.alias))
}

// lookupSim returns the open sim buffer whose mapping holds addr.
func lookupSim(addr uintptr) *Buffer {
	simRegistry.RLock()
	defer simRegistry.RUnlock()
	rs := simRegistry.ranges
	i, found := slices.BinarySearchFunc(rs, addr, func(e simRange, a uintptr) int {
		return cmpAddr(e.start, a)
	})
	if !found {
		// i is the first range starting after addr; the one before may hold it.
		i--
	}
	if i >= 0 && i < len(rs) && rs[i].start <= addr && addr < rs[i].end {
		return rs[i].b
	}
	return nil
}

func cmpAddr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
