package verbs_test

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/verbs"
)

// TestContractPageProtections: on every provider, a registration checks the pages'
// protections as ibv_reg_mr's pin does, and what it takes works. Read-only memory
// registers for reads, and a peer's RDMA READ of it returns its bytes; an access that
// lets the NIC write it (local write, remote write, remote atomics) fails with
// EFAULT. Memory that the process may not even read (PROT_NONE) is refused with
// EFAULT, or, where a provider takes it for reads (rxe pins it), a peer's read of it
// returns its bytes. soft0 took all of these before session 46 and moves bytes with
// the CPU: a peer's RDMA write into the read-only pages killed the process (SIGSEGV in
// its copy; found by a review).
func TestContractPageProtections(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		a, b := connected(t, p)
		pg := os.Getpagesize()
		mapping := func(prot int) uintptr {
			m, err := unix.Mmap(-1, 0, 2*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, unix.Munmap(m)) })
			for i := range m {
				m[i] = byte(i*7 + prot)
			}
			require.NoError(t, unix.Mprotect(m, prot))
			return uintptr(unsafe.Pointer(&m[0]))
		}
		want := func(prot int) []byte {
			w := make([]byte, 2*pg)
			for i := range w {
				w[i] = byte(i*7 + prot)
			}
			return w
		}
		// readBack has a read the whole registration mr of b.
		sink := newBuffer(t, a.pd, 2*pg, rw)
		readBack := func(mr *verbs.MR) []byte {
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMARead, Signaled: true,
				SGE: []verbs.SGE{sink.sge(0, 2*pg)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()}))
			wc := waitWCs(t, a.cq, 1)[0]
			require.Equal(t, verbs.WCSuccess, wc.Status, "%v", wc)
			return append([]byte(nil), sink.b[:2*pg]...)
		}

		ro := mapping(unix.PROT_READ)
		for _, access := range []verbs.Access{verbs.AccessLocalWrite, verbs.AccessLocalWrite | verbs.AccessRemoteWrite,
			verbs.AccessLocalWrite | verbs.AccessRemoteAtomic, rw} {
			_, err := b.pd.RegMRAddr(ro, 2*pg, access)
			require.ErrorIs(t, err, unix.EFAULT, "read-only memory registered with %v", access)
		}
		// A large range, which soft0 checks by the mappings alone (verbs/soft_prot.go).
		big, err := unix.Mmap(-1, 0, 4<<20, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		require.NoError(t, err)
		defer func() { require.NoError(t, unix.Munmap(big)) }()
		_, err = b.pd.RegMRAddr(uintptr(unsafe.Pointer(&big[0])), len(big), rw)
		require.ErrorIs(t, err, unix.EFAULT, "4 MiB of read-only memory registered for writes")
		mr, err := b.pd.RegMRAddr(ro, 2*pg, verbs.AccessRemoteRead)
		require.NoError(t, err, "read-only memory for reads")
		require.Equal(t, want(unix.PROT_READ), readBack(mr), "a peer's read of read-only memory")
		require.NoError(t, mr.Close())

		none := mapping(unix.PROT_NONE)
		mr, err = b.pd.RegMRAddr(none, 2*pg, verbs.AccessRemoteRead)
		if err != nil {
			require.ErrorIs(t, err, unix.EFAULT, "memory that may not be read")
			t.Logf("PROT_NONE refused: %v", err)
			return
		}
		t.Logf("PROT_NONE taken for reads")
		require.Equal(t, want(unix.PROT_NONE), readBack(mr), "a peer's read of memory the process may not read")
		require.NoError(t, mr.Close())
	})
}
