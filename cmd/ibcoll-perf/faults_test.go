package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// TestFaultNeverFired: a --fault whose step the run never takes is named, with why,
// and the run exits 2, also beside a fault that fired (exit 3 otherwise); a fault that
// fires is said to have fired, with its ranks, and never as unfired.
func TestFaultNeverFired(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		want  int
		quiet bool     // no fault is reported as never fired
		says  []string // in the report
	}{
		{"copyin of a host source", []string{"-c", "scatter", "-m", "host,sim", "--fault", "copyin@0"}, exitUsage, false,
			[]string{"--fault copyin@0:1 never fired", "nothing was copied in on rank 0", "host memory"}},
		{"copyout of a host destination", []string{"-c", "gather", "-m", "host,host", "--fault", "copyout@0"}, exitUsage, false,
			[]string{"--fault copyout@0:1 never fired", "nothing was copied out on rank 0"}},
		{"init beyond the run", []string{"-c", "bcast", "--fault", "init@2:1000"}, exitUsage, false,
			[]string{"--fault init@2:1000 never fired", "rank 2 initialized", "fewer than 1000"}},
		{"on every rank, never", []string{"-c", "gather", "-m", "host,host", "--fault", "copyin@*"}, exitUsage, false,
			[]string{"--fault copyin@*:1 never fired"}},
		{"one fired, one not", []string{"-c", "scatter", "-m", "sim,host", "--fault", "copyin@0", "--fault", "copyout@1"}, exitUsage, false,
			[]string{"--fault copyout@1:1 never fired", "--fault copyin@0:1 fired on rank 0\n"}},
		{"fired", []string{"-c", "scatter", "-m", "sim,host", "--fault", "copyin@0"}, exitCollective, true,
			[]string{"--fault copyin@0:1 fired on rank 0\n"}},
		{"fired on every rank", []string{"-c", "gather", "-m", "sim,sim", "--fault", "alloc@*"}, exitCollective, true,
			[]string{"--fault alloc@*:1 fired on ranks 0,1,2,3\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-np", "4", "-b", "1K", "-e", "2K", "-n", "3", "-w", "1", "--check", "--timeout", "20s"}, c.args...)
			code, out := capture(t, args...)
			require.Equal(t, c.want, code, out)
			if c.quiet {
				require.NotContains(t, out, "never fired", out)
			}
			// A fault reported as never fired is not also said to have fired.
			for _, m := range regexp.MustCompile(`--fault (\S+) never fired`).FindAllStringSubmatch(out, -1) {
				require.NotContains(t, out, "--fault "+m[1]+" fired on", out)
			}
			for _, s := range c.says {
				require.Contains(t, out, s)
			}
			if c.name == "one fired, one not" {
				require.NotContains(t, out, "copyin@0:1 never fired", "copyin@0 fired")
			}
		})
	}
}

// TestNpRefusedBeyondMemory: -np whose teams, or teams and data buffers, would not fit
// in 3/4 of MemAvailable is refused with an estimate (exit 2) before anything is
// built; what fits runs.
func TestNpRefusedBeyondMemory(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "meminfo")
	require.NoError(t, os.WriteFile(p, []byte("MemTotal:        2097152 kB\nMemFree:          100000 kB\nMemAvailable:    1048576 kB\n"), 0o600))
	old := meminfoPath
	meminfoPath = p
	t.Cleanup(func() { meminfoPath = old })

	// Pairwise alltoall links every rank to every rank: 1023 queue pairs each.
	code, out := capture(t, "-np", "1024", "-c", "alltoall")
	require.Equal(t, exitUsage, code, out)
	for _, s := range []string{"-np", "1024 ranks", "1023 queue pairs per rank", "1.0 GiB", "MemAvailable"} {
		require.Contains(t, out, s)
	}
	// A 1 MiB allreduce runs the ring: 5 operations per rank and step.
	code, out = capture(t, "-np", "512", "-c", "allreduce", "-b", "1M", "-e", "1M")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "2560 operations per rank", out)
	// The data buffers count too: 8 ranks of 4 MiB alltoall blocks with --check hold
	// about 1.5 GiB (each rank's 32 MiB source and destination, the host buffer, and
	// the check's input, expected output and canary); the teams need little.
	code, out = capture(t, "-np", "8", "-c", "alltoall", "-b", "4M", "-e", "4M", "--check")
	require.Equal(t, exitUsage, code, out)
	for _, s := range []string{"8 ranks", "for the data buffers of the largest row", "1.5 GiB", "-e"} {
		require.Contains(t, out, s)
	}
	code, out = capture(t, "-np", "4", "-c", "barrier", "-n", "2", "-w", "0")
	require.Equal(t, exitOK, code, out)
}

func TestMemAvailable(t *testing.T) {
	got, ok := memAvailable(strings.NewReader("MemTotal: 10 kB\nMemAvailable:   123 kB\n"))
	require.True(t, ok)
	require.Equal(t, uint64(123<<10), got)
	for _, bad := range []string{"", "MemAvailable: 12 MB\n", "MemAvailable: x kB\n", "MemAvailable:\n"} {
		_, ok := memAvailable(strings.NewReader(bad))
		require.False(t, ok, "%q", bad)
	}
	est := func(args ...string) uint64 {
		o, err := parseOptions(args, io.Discard)
		require.NoError(t, err)
		e, _, _, err := o.runEstimate(o.np)
		require.NoError(t, err)
		return e
	}
	require.Less(t, est("-np", "1024", "-c", "gather,allreduce", "-b", "8", "-e", "8"), uint64(4<<30), "1024 ranks fit a lazy wire-up in 4 GiB")
	require.Greater(t, est("-np", "1024", "-c", "alltoall", "-b", "8", "-e", "8"), uint64(20<<30), "not a full mesh of them")
	require.Greater(t, est("-np", "1024", "-c", "allreduce", "-b", "8", "-e", "1M"), uint64(6<<30), "nor 1024 rings")
	require.Less(t, est("-np", "8"), uint64(32<<20))
}

// TestFaultHelpListsAcceptedKinds: the --fault help names exactly the kinds that
// --fault takes (it listed all of coll's, three of which it refuses).
func TestFaultHelpListsAcceptedKinds(t *testing.T) {
	var help strings.Builder
	_, err := parseOptions([]string{"-h"}, &help)
	require.Error(t, err)
	m := regexp.MustCompile(`\(kinds: ([a-z, ]+)\)`).FindStringSubmatch(help.String())
	require.NotNil(t, m, "the --fault help lists its kinds:\n%s", help.String())
	listed := strings.Split(m[1], ", ")
	for _, k := range coll.FaultKinds() {
		_, err := parseOptions([]string{"--fault", k.String() + "@0"}, io.Discard)
		if slices.Contains(listed, k.String()) {
			require.NoError(t, err, "listed kind %v", k)
		} else {
			require.ErrorContains(t, err, "not one of "+m[1], "unlisted kind %v", k)
		}
	}
}

// TestFaultInLineUpNamed: a fault that fires in the tool's own line-up barrier (init
// at :1 is the first line-up's Init) is reported as the barrier's, not as a failure of
// the measured collective, which never ran.
func TestFaultInLineUpNamed(t *testing.T) {
	code, out := capture(t, "-np", "4", "-c", "allreduce", "-b", "1K", "-e", "1K", "-n", "2", "-w", "1", "-q", "--fault", "init@1")
	require.Equal(t, exitCollective, code, out)
	require.Equal(t, 4, strings.Count(out, "ibcoll-perf's untimed line-up barrier before iteration 1 (of 3, warm-up included) failed, not the measured collective"), out)
}

// TestPersistentInitFaultFailsAtOnce: a persistent request whose Init fails on one rank
// fails the collective on every rank through its number, as a non-persistent one does
// (with the Init before the line-up, the others waited in the line-up barrier until
// the failed rank's result exchange gave up, and the report blamed the barrier).
func TestPersistentInitFaultFailsAtOnce(t *testing.T) {
	code, out := capture(t, "-np", "2", "-c", "allreduce", "-b", "8", "-e", "8", "-n", "2", "-w", "0", "-q", "-p", "--fault", "init@1:2")
	require.Equal(t, exitCollective, code, out)
	require.Contains(t, out, "injected fault: init #2")
	require.NotContains(t, out, "line-up barrier", out)
	require.NotContains(t, out, "could not be exchanged", out)
}

// TestFailedCheckWithPlotExitsOne: a run whose every row failed its check exits 1 with
// --plot too (the plot of nothing turned it into 2, a bad argument's status).
func TestFailedCheckWithPlotExitsOne(t *testing.T) {
	corruptOutput = func(s shape, it int, got []byte) {
		if len(got) > 0 {
			got[0] ^= 0x40
		}
	}
	defer func() { corruptOutput = nil }()
	plot := filepath.Join(t.TempDir(), "bw.svg")
	code, out := capture(t, "-np", "2", "-c", "allgather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q", "--check", "--plot", plot)
	require.Equal(t, exitCheck, code, out)
	require.Contains(t, out, "no successful rows to plot; no file written")
	require.NoFileExists(t, plot)
}

// TestFaultWithoutEffectNotFired: a fault whose step was reached but whose failure had
// no effect (rank 0's qperr at its second post, when the copy-in fault failed that post
// first) is reported as never fired, saying why, and the run exits 2; the copy-in fault
// fired. Before, reaching the step counted as firing, and the run claimed to have
// tested the broken link (a review found it).
func TestFaultWithoutEffectNotFired(t *testing.T) {
	code, out := capture(t, "-np", "2", "-c", "gather", "-m", "sim", "--fault", "copyin@0", "--fault", "qperr@0:2",
		"-b", "8", "-e", "8", "-n", "2", "-w", "0", "-q")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "--fault copyin@0:1 fired on rank 0")
	require.Contains(t, out, "--fault qperr@0:2 never fired")
	require.Contains(t, out, "the injected one had no effect")
	require.NotContains(t, out, "--fault qperr@0:2 fired")
}
