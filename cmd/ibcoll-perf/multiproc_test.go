package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// The multi-process tests start this test binary as the tool (see
// TestMain) under a plain launcher and under mpirun. soft0 does not cross
// processes, so they need a real device: they run in the rxe VM.

const asToolEnv = "IBCOLL_PERF_AS_TOOL"

func TestMain(m *testing.M) {
	if os.Getenv(asToolEnv) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	testutil.LeakCheck(m, verbs.CheckLeaks)
}

func realDevice(t *testing.T) string {
	t.Helper()
	devs, err := verbs.Devices()
	require.NoError(t, err)
	for _, d := range devs {
		if d.Provider == "ibv" && d.Active() {
			return d.Name
		}
	}
	testutil.RequireRDMA(t, false, "multi-process runs need a libibverbs device (soft0 is in-process only)")
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type proc struct {
	cmd *exec.Cmd
	out syncBuffer
}

// syncBuffer is an output buffer the test may read while the process writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) contains(sub string) bool { return strings.Contains(s.String(), sub) }

// launch starts n processes of the tool the way a plain launcher does:
// IBCOLL_RANK, IBCOLL_SIZE and IBCOLL_STORE in each one's environment.
func launch(t *testing.T, n int, args ...string) []*proc {
	t.Helper()
	store := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var ps []*proc
	for r := 0; r < n; r++ {
		p := &proc{cmd: exec.Command(os.Args[0], args...)}
		p.cmd.Env = append(os.Environ(), asToolEnv+"=1", fmt.Sprintf("IBCOLL_RANK=%d", r), fmt.Sprintf("IBCOLL_SIZE=%d", n),
			"IBCOLL_STORE="+store)
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
		require.NoError(t, p.cmd.Start())
		ps = append(ps, p)
	}
	t.Cleanup(func() {
		for _, p := range ps {
			if p.cmd.ProcessState == nil {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	})
	return ps
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

func TestMultiProcessLauncher(t *testing.T) {
	dev := realDevice(t)
	t.Logf("4 processes on %s", dev)
	ps := launch(t, 4, "-c", "gather,scatter,bcast,reduce,allreduce", "-b", "4", "-e", "4K", "-f", "16", "-n", "3", "-w", "1",
		"--check", "-d", "int32", "-o", "sum", "-r", "1", "--timeout", "120s", "-q", "--device", dev)
	for r, p := range ps {
		err := p.cmd.Wait()
		require.Equal(t, 0, exitCode(err), "rank %d:\n%s", r, p.out.String())
	}
	out := ps[0].out.String()
	t.Logf("rank 0:\n%s", out)
	require.Contains(t, out, "4 processes (ibcoll")
	for _, c := range []string{"gather", "scatter", "bcast", "reduce", "allreduce"} {
		require.Contains(t, out, "# collective "+c+",")
	}
	require.Equal(t, 15, strings.Count(out, "  ok\n"), "3 sizes × 5 collectives checked")
}

// TestMultiProcessNewCollectives: reduce_scatter, allgatherv and alltoallv
// across processes, persistent and in place, each rank with its own
// memory types.
func TestMultiProcessNewCollectives(t *testing.T) {
	dev := realDevice(t)
	ps := launch(t, 3, "-c", "reduce_scatter,allgatherv,alltoallv", "-b", "4", "-e", "4K", "-f", "32", "-n", "3", "-w", "1",
		"--check", "-d", "int32", "-o", "sum", "-p", "-i", "--rank-mem", "0:host,sim;2:sim,sim", "--timeout", "120s", "-q", "--device", dev)
	for r, p := range ps {
		err := p.cmd.Wait()
		require.Equal(t, 0, exitCode(err), "rank %d:\n%s", r, p.out.String())
	}
	out := ps[0].out.String()
	t.Logf("rank 0:\n%s", out)
	require.Equal(t, 9, strings.Count(out, "  ok\n"), "3 sizes × 3 collectives checked")
}

// TestMultiProcessKilledRank kills one rank (SIGKILL) in the middle of a sweep: the
// others must end with exit status 3 within their deadline, not hang, and rank 0 (the
// one that prints) names the dead rank: its connection to the store drops with the
// process, and the store sets its will (coll's PeerWatcher). Rank 0 measured 5.0-5.4 s
// after the kill (5 s of it the tool waiting for the dead rank's report); since the
// lazy wire-up, rank 1 was once seen to end only at its deadline (open: issue 13), so
// the bound is the deadline's, as before.
func TestMultiProcessKilledRank(t *testing.T) {
	dev := realDevice(t)
	const timeout = 20 * time.Second
	ps := launch(t, 3, "-c", "allreduce", "-b", "4", "-e", "4", "-n", "100000", "-w", "0", "--timeout", timeout.String(), "-q", "--device", dev)
	// Kill it once the sweep runs (rank 0 printed its header), well into
	// the iterations: not while the ranks are still meeting.
	for start := time.Now(); !ps[0].out.contains("# collective allreduce"); {
		require.Less(t, time.Since(start), 2*time.Minute, "the sweep never started:\n%s", ps[0].out.String())
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	require.NoError(t, ps[2].cmd.Process.Signal(syscall.SIGKILL))
	t.Logf("killed rank 2 at %v", time.Now().Format("15:04:05.000"))
	killed := time.Now()
	_ = ps[2].cmd.Wait()
	for r := 0; r < 2; r++ {
		err := ps[r].cmd.Wait()
		took := time.Since(killed)
		out := ps[r].out.String()
		require.Equal(t, exitCollective, exitCode(err), "rank %d:\n%s", r, out)
		t.Logf("rank %d exited 3 after %v:\n%s", r, took.Round(time.Millisecond), out)
		if r == 0 {
			require.Contains(t, out, "rank 2's process died", "rank 0 names the dead rank")
		}
		require.Less(t, took, timeout+15*time.Second, "rank %d ended within its deadline", r)
	}
}

// TestMPIRun starts the tool with Open MPI's mpirun (Debian's openmpi-bin,
// in the VM image built with RXEVM_WITH_MPI=1).
func TestMPIRun(t *testing.T) {
	dev := realDevice(t)
	mpirun, err := exec.LookPath("mpirun")
	testutil.Require(t, "mpi", err == nil, "mpirun not found")
	store := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(mpirun, "-np", "3", "--oversubscribe", "-x", asToolEnv+"=1", "-x", "IBCOLL_STORE="+store,
		os.Args[0], "-c", "gather,scatter,allreduce", "-b", "64", "-e", "1K", "-f", "16", "-n", "2", "-w", "1", "--check",
		"--timeout", "120s", "-q", "--device", dev)
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("%s", out)
	require.Contains(t, string(out), "3 processes (openmpi")
	require.Equal(t, 6, strings.Count(string(out), "  ok\n"))
}
