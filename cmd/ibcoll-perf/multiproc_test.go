package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
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

// holdEnv names the phase at which a process of the tool stops (holdAt) until killed.
const holdEnv = "IBCOLL_PERF_TEST_HOLD"

func TestMain(m *testing.M) {
	if os.Getenv(asToolEnv) == "1" {
		if phase := os.Getenv(holdEnv); phase != "" {
			holdAt = func(p string) {
				if p == phase {
					fmt.Fprintf(os.Stderr, "# test: holding at %s\n", p)
					for {
						time.Sleep(time.Hour)
					}
				}
			}
		}
		os.Exit(run(os.Args[1:]))
	}
	testutil.LeakCheck(m, verbs.CheckLeaks)
}

func realDevice(t *testing.T) string {
	t.Helper()
	name := firstNIC(t)
	testutil.RequireRDMA(t, name != "", "multi-process runs need a libibverbs device (soft0 is in-process only)")
	return name
}

// firstNIC is this host's first active libibverbs device ("" for none), which a
// launched rank's default device then is.
func firstNIC(t *testing.T) string {
	t.Helper()
	devs, err := verbs.Devices()
	require.NoError(t, err)
	for _, d := range devs {
		if d.Provider == "ibv" && d.Active() {
			return d.Name
		}
	}
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
	return launchEnv(t, n, nil, args...)
}

// launchEnv is launch with env(r) added to rank r's environment.
func launchEnv(t *testing.T, n int, env func(r int) []string, args ...string) []*proc {
	t.Helper()
	store := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var ps []*proc
	for r := 0; r < n; r++ {
		p := &proc{cmd: exec.Command(os.Args[0], args...)}
		p.cmd.Env = append(os.Environ(), asToolEnv+"=1", fmt.Sprintf("IBCOLL_RANK=%d", r), fmt.Sprintf("IBCOLL_SIZE=%d", n),
			"IBCOLL_STORE="+store)
		if env != nil {
			p.cmd.Env = append(p.cmd.Env, env(r)...)
		}
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

// TestMultiProcessKilled kills one of 3 processes (SIGKILL) while the others create
// the team, while they wait in the first collective (the victim never initialized it),
// and in the middle of a sweep; for rank 0 (which serves the store), a middle rank and
// the last rank. The collective timeout is a minute: every survivor must end with exit
// status 3 well before it (20 s; measured 0.06-0.41 s in the VM), so the death was
// noticed, not the deadline; and its output must name the victim: the store's news of the death, a queue pair to it in error (whichever came
// first), or, for rank 0, the store lost with it.
func TestMultiProcessKilled(t *testing.T) {
	dev := realDevice(t)
	const n = 3
	const bound = 20 * time.Second
	for _, phase := range []string{"team", "init", "mid"} {
		for _, victim := range []int{0, 1, n - 1} {
			t.Run(fmt.Sprintf("%s/rank%d", phase, victim), func(t *testing.T) {
				killed(t, dev, n, phase, victim, bound)
			})
		}
	}
}

func killed(t *testing.T, dev string, n int, phase string, victim int, bound time.Duration) {
	env := func(r int) []string {
		if r == victim && phase != "mid" {
			return []string{holdEnv + "=" + phase}
		}
		return nil
	}
	ps := launchEnv(t, n, env, "-c", "allreduce", "-b", "4", "-e", "4", "-n", "100000", "-w", "0",
		"--timeout", "60s", "-q", "--device", dev)
	marker, who := "# test: holding at "+phase, victim
	if phase == "mid" {
		marker, who = "# collective allreduce", 0 // rank 0's sweep began
	}
	for start := time.Now(); !ps[who].out.contains(marker); {
		require.Less(t, time.Since(start), 2*time.Minute, "rank %d never printed %q:\n%s", who, marker, ps[who].out.String())
		time.Sleep(50 * time.Millisecond)
	}
	// Let the others get to where the phase leaves them: waiting in NewTeam or in the
	// first collective; mid-sweep, well into the iterations.
	time.Sleep(map[string]time.Duration{"team": time.Second, "init": time.Second, "mid": 2 * time.Second}[phase])
	require.NoError(t, ps[victim].cmd.Process.Signal(syscall.SIGKILL))
	killedAt := time.Now()
	_ = ps[victim].cmd.Wait()
	names := fmt.Sprintf(`rank %d's process died|queue pair to rank %d failed`, victim, victim)
	if victim == 0 {
		names += `|lost the store`
	}
	for r := 0; r < n; r++ {
		if r == victim {
			continue
		}
		// A survivor still running past the bound dumps its goroutines (SIGQUIT), so
		// that the failure shows where it waits.
		dump := time.AfterFunc(bound-time.Since(killedAt), func() { _ = ps[r].cmd.Process.Signal(syscall.SIGQUIT) })
		err := ps[r].cmd.Wait()
		dump.Stop()
		took := time.Since(killedAt)
		out := ps[r].out.String()
		require.Equal(t, exitCollective, exitCode(err), "rank %d:\n%s", r, out)
		t.Logf("rank %d exited 3 after %v:\n%s", r, took.Round(time.Millisecond), out)
		require.Less(t, took, bound, "rank %d noticed the death, not its deadline", r)
		require.Regexp(t, names, out, "rank %d names the dead rank %d", r, victim)
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

// TestLaunchedRefusal: a rank under a launcher that refuses its own environment
// (here IBCOLL_GID_INDEX on rank 1 alone) used to leave at once and silently, while
// the others waited out their timeout plus a minute for it at the store. Every rank
// now says why it refused at once and meets the others: all end at once with exit
// status 2, and rank 0 names who refused what (once for all the ranks that refused
// alike). An argument, the same on every rank, is refused by each at once, rank 0
// alone saying so, and before any rank looks at its environment (a rank that refused
// its environment waited alone where the others had refused an argument). Ranks open
// no device for a collective here, so it runs anywhere; on a host without a NIC the
// ranks that accept their environment refuse soft0 (one more line from rank 0).
func TestLaunchedRefusal(t *testing.T) {
	const n = 3
	plotDir := t.TempDir() + "/plots" // missing: rank 0 alone writes the plot
	var others []int                  // the ranks that, accepting their environment, refuse soft0
	if firstNIC(t) == "" {
		others = []int{1, 2}
	}
	for _, tc := range []struct {
		name    string
		env     func(r int) []string
		args    []string
		want    string // rank 0 says it once
		refused []int  // the ranks that say their own refusal too
	}{
		{"one rank's environment", func(r int) []string {
			if r == 1 {
				return []string{"IBCOLL_GID_INDEX=abc"}
			}
			return nil
		}, nil, "ibcoll-perf: rank 1: environment: ", append([]int{1}, others...)},
		{"every rank's environment", func(int) []string { return []string{"IBCOLL_ALG_GATHER=nonesuch"} }, nil,
			"ibcoll-perf: ranks 0-2: $IBCOLL_ALG_GATHER: ", []int{1, 2}},
		{"an argument", nil, []string{"-r", "7"}, "ibcoll-perf: -r: root 7 is not a rank", nil},
		{"an argument before one rank's environment", func(r int) []string {
			if r == 1 {
				return []string{"IBCOLL_GID_INDEX=abc"}
			}
			return nil
		}, []string{"-c", "reduce_scatter", "--alg", "reduce_scatter=rh"}, "ibcoll-perf: --alg: reduce_scatter rh: ", nil},
		// soft0 reaches only the ranks of its own process: every collective failed
		// on the first connection.
		{"soft0 under a launcher", nil, []string{"--device", "soft0"},
			"ibcoll-perf: ranks 0-2: --device: soft0 reaches only the ranks of its own process", []int{1, 2}},
		{"rank 0's plot", nil, []string{"--plot", plotDir + "/bw.svg"}, "ibcoll-perf: rank 0: --plot: ", others},
		// A malformed local rank places the process in the job but not on its
		// node: it left at once, and the others waited out their timeout.
		{"one rank's place on its node", func(r int) []string {
			if r == 2 {
				return []string{"IBCOLL_LOCAL_RANK=x"}
			}
			return nil
		}, nil, "ibcoll-perf: rank 2: launcher environment: ", append([]int{2}, others[:min(1, len(others))]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			args := append([]string{"-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q", "--timeout", "60s"}, tc.args...)
			ps := launchEnv(t, n, tc.env, args...)
			for r, p := range ps {
				err := p.cmd.Wait()
				require.Equal(t, exitUsage, exitCode(err), "rank %d:\n%s", r, p.out.String())
				if r > 0 {
					if slices.Contains(tc.refused, r) {
						require.Contains(t, p.out.String(), fmt.Sprintf("ibcoll-perf: rank %d: ", r), "it says why at once")
					} else {
						require.Empty(t, p.out.String(), "rank %d: rank 0 says it", r)
					}
				}
			}
			require.Less(t, time.Since(start), 30*time.Second, "every rank ends at once, not at its timeout")
			out := ps[0].out.String()
			require.Equal(t, 1, strings.Count(out, tc.want), "once:\n%s", out)
			require.LessOrEqual(t, strings.Count(out, "ibcoll-perf:"), 2, out)
		})
	}
}

// TestRefusedWithoutStore: a rank that refuses its environment and cannot reach the
// store says why at once and gives up after refusedWait, not after its timeout plus a
// minute.
func TestRefusedWithoutStore(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q", "--timeout", "600s")
	cmd.Env = append(os.Environ(), asToolEnv+"=1", "IBCOLL_RANK=1", "IBCOLL_SIZE=2",
		fmt.Sprintf("IBCOLL_STORE=127.0.0.1:%d", freePort(t)), "IBCOLL_GID_INDEX=abc")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool { return out.contains("ibcoll-perf: rank 1: environment: ") }, 10*time.Second, 10*time.Millisecond,
		"it says why at once")
	start := time.Now()
	err := cmd.Wait()
	require.Equal(t, exitUsage, exitCode(err), out.String())
	require.Less(t, time.Since(start), refusedWait+10*time.Second)
}
