package mem_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

const faultChildEnv = "IBCOLL_MEM_SIM_FAULT_CHILD"

// A CPU read of a sim address must fault: that is what catches code that
// hands device memory to the CPU without staging it. The read runs in a
// child process, since the fault kills it.
func TestSimFault(t *testing.T) {
	if os.Getenv(faultChildEnv) != "" {
		t.Skip("in the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSimFaultChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), faultChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("child output:\n%s", out)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "child must fail, got %v", err)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), "unexpected fault address")
	require.Contains(t, string(out), "SIGSEGV")
	require.NotContains(t, string(out), "survived")
}

func TestSimFaultChild(t *testing.T) {
	if os.Getenv(faultChildEnv) == "" {
		t.Skip("run by TestSimFault in a child process")
	}
	b, err := mem.Alloc(mem.Sim, 4096)
	require.NoError(t, err)
	v := peek(b.Addr() + 100)
	fmt.Println("survived a read of sim memory:", v)
}

func TestTypeOf(t *testing.T) {
	e := newEnv(t)
	slice := make([]byte, 64)
	require.Equal(t, mem.Host, mem.TypeOf(uintptr(unsafe.Pointer(&slice[0]))))
	h := e.alloc(mem.Host, 4096)
	require.Equal(t, mem.Host, mem.TypeOf(h.Addr()))
	require.Equal(t, mem.Host, mem.TypeOf(0))

	s, err := mem.Alloc(mem.Sim, 10000)
	require.NoError(t, err)
	a, mapped := s.Addr(), uintptr(mem.SimMappedLen(s))
	for _, p := range []uintptr{a, a + 1, a + 9999, a + mapped - 1} {
		require.Equal(t, mem.Sim, mem.TypeOf(p), "%#x in [%#x, %#x)", p, a, a+mapped)
	}
	// The only sim buffer open, so its neighbours are not sim.
	require.Equal(t, mem.Host, mem.TypeOf(a-1))
	require.Equal(t, mem.Host, mem.TypeOf(a+mapped))

	// A second buffer does not hide the first.
	s2, err := mem.Alloc(mem.Sim, 4096)
	require.NoError(t, err)
	require.Equal(t, mem.Sim, mem.TypeOf(a+5000))
	require.Equal(t, mem.Sim, mem.TypeOf(s2.Addr()+4095))
	require.NoError(t, s2.Close())

	require.NoError(t, s.Close())
	for _, p := range []uintptr{a, a + 5000} {
		require.Equal(t, mem.Host, mem.TypeOf(p), "closed")
	}
}
