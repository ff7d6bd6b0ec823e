package mem_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/mem"
)

func TestCUDAAllocTypeOf(t *testing.T) {
	requireCUDA(t)
	e := newEnv(t)
	const n = 1 << 20

	d := e.alloc(mem.CUDA, n)
	require.Equal(t, mem.CUDA, d.Type())
	require.NotZero(t, d.Addr())
	require.Nil(t, d.Bytes(), "device memory has no CPU view")
	for _, p := range []uintptr{d.Addr(), d.Addr() + 12345, d.Addr() + n - 1} {
		require.Equal(t, mem.CUDA, mem.TypeOf(p), "%#x", p)
	}

	m, data := e.randomized(mem.CUDAManaged, n)
	for _, p := range []uintptr{m.Addr(), m.Addr() + 777, m.Addr() + n - 1} {
		require.Equal(t, mem.CUDAManaged, mem.TypeOf(p), "%#x", p)
	}
	require.Len(t, m.Bytes(), n)
	h := e.alloc(mem.Host, n)
	require.NoError(t, mem.Copy(h, 0, m, 0, n), "what the CPU wrote through Bytes, the driver copies")
	requireSameBytes(t, data, h.Bytes())

	require.Equal(t, mem.Host, mem.TypeOf(h.Addr()))
	slice := make([]byte, 8)
	require.Equal(t, mem.Host, mem.TypeOf(uintptr(unsafe.Pointer(&slice[0]))))
	s := e.alloc(mem.Sim, 4096)
	require.Equal(t, mem.Sim, mem.TypeOf(s.Addr()+10))

	x, err := mem.Alloc(mem.CUDA, n)
	require.NoError(t, err)
	a := x.Addr()
	require.NoError(t, x.Close())
	require.NoError(t, x.Close())
	require.Equal(t, mem.Host, mem.TypeOf(a), "freed device memory is no longer CUDA")
}

func TestCUDAAllocErrors(t *testing.T) {
	requireCUDA(t)
	// Plain device memory only: an oversized managed request can wedge the GPU.
	b, err := mem.Alloc(mem.CUDA, 1<<50)
	require.Nil(t, b)
	require.ErrorIs(t, err, unix.ENOMEM)
	var cerr *mem.CUDAError
	require.True(t, errors.As(err, &cerr))
	require.Equal(t, "cuMemAlloc_v2", cerr.Func)
	require.Equal(t, "CUDA_ERROR_OUT_OF_MEMORY", cerr.Name)
	t.Log(err)
}

func TestCUDACopyMatrix(t *testing.T) {
	requireCUDA(t)
	copyMatrix(t, copyTypes(true), true, false)
}

func TestCUDACopyAsyncMatrix(t *testing.T) {
	requireCUDA(t)
	copyMatrix(t, copyTypes(true), true, true)
}

// The same, with every GPU copy issued by the stream's goroutine (the diagnosis
// build's IBCOLL_X_GPU_WORKER), and GPU and host-side copies interleaved on it.
func TestCUDACopyAsyncOnWorker(t *testing.T) {
	requireCUDA(t)
	old := mem.SetGPUIssueOnWorker(true)
	t.Cleanup(func() { mem.SetGPUIssueOnWorker(old) })
	copyMatrix(t, copyTypes(true), true, true)
	testStreamChain(t, []mem.Type{mem.CUDA, mem.Host, mem.CUDA, mem.CUDAManaged, mem.Sim, mem.CUDA, mem.DM, mem.CUDA, mem.CUDA})
}

func TestCUDACopyOverlap(t *testing.T) {
	requireCUDA(t)
	testOverlap(t, []mem.Type{mem.CUDA, mem.CUDAManaged})
}

// GPU copies and host-side copies (sim, DM) interleave on one stream and
// still run in order.
func TestCUDAStreamOrder(t *testing.T) {
	requireCUDA(t)
	testStreamChain(t, []mem.Type{mem.CUDA, mem.Host, mem.CUDA, mem.CUDAManaged, mem.Sim, mem.CUDA, mem.DM, mem.CUDA, mem.CUDA})
}

func TestCUDACopyPtr(t *testing.T) {
	requireCUDA(t)
	e := newEnv(t)
	const n = 100000
	d1 := e.alloc(mem.CUDA, n)
	d2 := e.alloc(mem.CUDA, n)
	s := e.alloc(mem.Sim, n)
	user := randBytes(e.r, n)
	out := make([]byte, n)
	up, op := uintptr(unsafe.Pointer(&user[0])), uintptr(unsafe.Pointer(&out[0]))

	require.NoError(t, mem.CopyPtr(d1.Addr(), mem.CUDA, up, mem.Host, n))
	require.NoError(t, mem.CopyPtr(d2.Addr()+10, mem.CUDA, d1.Addr(), mem.CUDA, n-10))
	require.NoError(t, mem.CopyPtr(s.Addr(), mem.Sim, d2.Addr(), mem.CUDA, n))
	require.NoError(t, mem.CopyPtr(op+10, mem.Host, s.Addr()+10, mem.Sim, n-10))
	requireSameBytes(t, user[:n-10], out[10:])
}

// Every goroutine may land on an OS thread that has never had a CUDA context;
// copies must work from all of them at once.
func TestCUDAConcurrent(t *testing.T) {
	requireCUDA(t)
	e := newEnv(t)
	const workers, n, rounds = 8, 256<<10 + 3, 20
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		h, data := e.randomized(mem.Host, n)
		d1, d2 := e.alloc(mem.CUDA, n), e.alloc(mem.CUDA, n)
		out := e.alloc(mem.Host, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				clear(out.Bytes())
				if err := errors.Join(
					mem.Copy(d1, 0, h, 0, n),
					mem.Copy(d2, 0, d1, 0, n),
					mem.Copy(out, 0, d2, 0, n),
				); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(data, out.Bytes()) {
					t.Errorf("worker round %d: data differs", i)
					return
				}
			}
		}()
	}
	wg.Wait()
}

const deviceEnvChild = "IBCOLL_MEM_DEVICE_ENV_CHILD"

// A device that is not there makes CUDA unavailable with an error that says
// why; it never crashes. It runs in a child process, since the driver is set
// up once per process.
func TestCUDADeviceSelect(t *testing.T) {
	if os.Getenv(deviceEnvChild) != "" {
		t.Skip("in the child")
	}
	require.ErrorIs(t, mem.UseCUDADevice(-1), mem.ErrInvalid)
	require.ErrorIs(t, mem.UseCUDADevice(1<<32), mem.ErrInvalid, "the driver's int would wrap it to device 0")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCUDADeviceSelectChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), deviceEnvChild+"=9999", "IBCOLL_REQUIRE=")
	out, err := cmd.CombinedOutput()
	t.Logf("child output:\n%s", out)
	require.NoError(t, err)
	require.Contains(t, string(out), "--- PASS: TestCUDADeviceSelectChild")
	if mem.CUDAAvailable() {
		require.Contains(t, string(out), "device 9999 requested")
		require.ErrorIs(t, mem.UseCUDADevice(1), mem.ErrBusy, "the device is fixed once CUDA is set up")
		require.NoError(t, mem.UseCUDADevice(0), "the device in use may be named again")
	}
}

func TestCUDADeviceSelectChild(t *testing.T) {
	dev := os.Getenv(deviceEnvChild)
	if dev == "" {
		t.Skip("run by TestCUDADeviceSelect in a child process")
	}
	n, err := strconv.Atoi(dev)
	require.NoError(t, err)
	require.NoError(t, mem.UseCUDADevice(n))
	require.False(t, mem.CUDAAvailable())
	b, err := mem.Alloc(mem.CUDA, 4096)
	require.Nil(t, b)
	t.Log(err)
	require.ErrorIs(t, err, mem.ErrNotSupported)
	require.Equal(t, mem.Host, mem.TypeOf(0x1000))
}

const firstChoiceChild = "IBCOLL_MEM_FIRST_CHOICE_CHILD"

// The first device chosen holds for the process: a later, different choice is refused
// instead of silently replacing it. In a child process, since the choice is
// process-wide.
func TestUseCUDADeviceFirstChoiceHolds(t *testing.T) {
	if os.Getenv(firstChoiceChild) != "" {
		require.NoError(t, mem.UseCUDADevice(1))
		require.ErrorIs(t, mem.UseCUDADevice(0), mem.ErrBusy)
		require.NoError(t, mem.UseCUDADevice(1), "the same choice again is fine")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUseCUDADeviceFirstChoiceHolds$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), firstChoiceChild+"=1", "IBCOLL_REQUIRE=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestUseCUDADeviceFirstChoiceHolds")
}

// TestCUDAPageableThenStream: a copy from pageable host memory to the device,
// synchronous or queued and waited for, is complete when that returns, so that a copy of the same bytes on a
// non-blocking stream right after it reads them all (it read the old bytes of the
// tail before the bounce buffers, 1 run in 20 of TestCUDACopyAsyncMatrix on the H200
// machine). Every such copy takes the bounce path: the counter says so.
func TestCUDAPageableThenStream(t *testing.T) {
	requireCUDA(t)
	e := newEnv(t)
	s, err := mem.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	s2, err := mem.NewStream()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s2.Close()) })
	copies := 0
	before := mem.CUDABounced()
	for _, n := range []int{1, 4095, 1<<20 + 7, 3<<20 + 5} {
		a, b := e.alloc(mem.CUDA, n), e.alloc(mem.CUDA, n)
		for i := 0; i < 25; i++ {
			p := randBytes(e.r, n)
			if i%2 == 0 {
				require.NoError(t, mem.CopyPtr(a.Addr(), mem.CUDA, uintptr(unsafe.Pointer(&p[0])), mem.Host, n))
			} else {
				// Queued on another stream, waited for, then read on s.
				require.NoError(t, mem.CopyPtrAsync(s2, a.Addr(), mem.CUDA, uintptr(unsafe.Pointer(&p[0])), mem.Host, n))
				require.NoError(t, s2.Synchronize())
			}
			copies++
			require.NoError(t, mem.CopyAsync(s, b, 0, a, 0, n))
			require.NoError(t, s.Synchronize())
			got, err := readPtr(b.Addr(), mem.CUDA, n)
			require.NoError(t, err)
			requireSameBytes(t, p, got, fmt.Sprintf("n %d, round %d", n, i))
		}
	}
	require.Equal(t, uint64(copies), mem.CUDABounced()-before, "copies from pageable memory that did not take the bounce buffers")
}
