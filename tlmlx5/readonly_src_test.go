package tlmlx5

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestReadOnlySourceRegisters: a source is registered with local write (regcache.go
// says why), and memory the process cannot write still registers, read-only: the
// writable pin of a PROT_READ mapping fails (EFAULT on a real device, rxe in the VM;
// soft0 reads the mappings' permissions since session 46) and the fallback is taken.
func TestReadOnlySourceRegisters(t *testing.T) {
	dev := verbs.SoftDeviceName
	devs, err := verbs.Devices()
	require.NoError(t, err)
	for _, d := range devs {
		if d.Provider == "ibv" && d.Active() {
			dev = d.Name
			break
		}
	}
	ctx, err := transport{}.Open(driver.Config{Device: dev})
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Close()) }()
	c := ctx.(*context)
	cache := newRegCache(c.pd)

	m, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { require.NoError(t, unix.Munmap(m)) }()
	m[0] = 1
	require.NoError(t, unix.Mprotect(m, unix.PROT_READ))
	addr := uintptr(unsafe.Pointer(&m[0]))

	e, err := cache.acquire(nil, nil, addr, 4096, readAccess, nil)
	require.NoError(t, err, "a read-only source registers on %s", dev)
	require.Equal(t, readOnlyAccess, e.mr.Access(), "%s refuses a writable pin of read-only memory: the fallback ran", dev)
	require.NoError(t, cache.release(e))

	w, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { require.NoError(t, unix.Munmap(w)) }()
	e, err = cache.acquire(nil, nil, uintptr(unsafe.Pointer(&w[0])), 4096, readAccess, nil)
	require.NoError(t, err)
	require.Equal(t, readAccess, e.mr.Access(), "writable memory: a writable pin, never the read-only one")
	require.Equal(t, verbs.AccessLocalWrite, e.mr.Access()&verbs.AccessLocalWrite)
	require.NoError(t, cache.release(e))
}
