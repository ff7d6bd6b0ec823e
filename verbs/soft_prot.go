package verbs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Page protections of soft0's registrations. ibv_reg_mr pins the pages, for writing
// where the access allows writes, and fails (EFAULT) on a page the process may not
// read, or write; soft0, which moves the bytes with the CPU, would die of the fault
// at the first access instead (a peer's RDMA write into read-only memory: SIGSEGV, a
// fatal error of the Go runtime). So it faults a range of up to populateMax in as
// the pin does (madvise MADV_POPULATE_WRITE, or _READ: EFAULT where an access would
// fault; about 5 µs for 4 KiB already in, 50 µs for 1 MiB), and reads the mappings'
// permissions in /proc/self/maps (about 60 µs whatever the size) for a larger range,
// for one the kernel cannot populate (before Linux 5.14; I/O mappings such as memory
// the CUDA driver pinned), and to say which mapping is at fault.

// writeAccess are the accesses under which the NIC (soft0: the CPU) writes the memory.
const writeAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteAtomic

// protected reports why [addr, addr+length) may not be registered with access: a part
// that no mapping covers, or one whose mapping may not be read, or written where
// access asks for writes; "" when it may. A maps file that cannot be read says
// nothing (mapped's mincore still checks that the pages exist).
func protected(addr uintptr, length int, access Access) string {
	advice := unix.MADV_POPULATE_READ
	if access&writeAccess != 0 {
		advice = unix.MADV_POPULATE_WRITE
	}
	pg := uintptr(unix.Getpagesize())
	start := addr &^ (pg - 1)
	end := (addr + uintptr(length) + pg - 1) &^ (pg - 1)
	if end-start <= populateMax {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, start, end-start, uintptr(advice)); e == 0 {
			return ""
		}
	}
	return fromMaps(addr, length, access)
}

// populateMax is the largest range protected faults in.
const populateMax = 1 << 20

// fromMaps is protected's answer from the mappings' permissions.
func fromMaps(addr uintptr, length int, access Access) string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return ""
	}
	defer f.Close()
	write := access&writeAccess != 0
	at, end := uint64(addr), uint64(addr)+uint64(length)
	sc := bufio.NewScanner(f)
	for sc.Scan() && at < end {
		lo, hi, perms, ok := mapsLine(sc.Bytes())
		if !ok || hi <= at {
			continue
		}
		if lo > at {
			return fmt.Sprintf("%#x is in no mapping", at)
		}
		switch {
		case perms[0] != 'r':
			return fmt.Sprintf("the mapping [%#x, %#x) may not be read (%s)", lo, hi, perms)
		case write && perms[1] != 'w':
			return fmt.Sprintf("the mapping [%#x, %#x) is read-only (%s), and the access asks for writes (%v)", lo, hi, perms, access&writeAccess)
		}
		at = hi
	}
	if at < end {
		return fmt.Sprintf("%#x is in no mapping", at)
	}
	return ""
}

// mapsLine parses "lo-hi perms ..." of /proc/self/maps.
func mapsLine(b []byte) (lo, hi uint64, perms string, ok bool) {
	sp := bytes.IndexByte(b, ' ')
	dash := bytes.IndexByte(b, '-')
	if sp < 0 || dash < 0 || dash > sp || len(b) < sp+5 {
		return 0, 0, "", false
	}
	lo, err1 := strconv.ParseUint(string(b[:dash]), 16, 64)
	hi, err2 := strconv.ParseUint(string(b[dash+1:sp]), 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, "", false
	}
	return lo, hi, string(b[sp+1 : sp+5]), true
}
