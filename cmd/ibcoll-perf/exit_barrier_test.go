package main

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/bootstrap"
)

// TestExitBarrierWhateverTheStatus: two launched ranks (goroutines of this process on
// soft0, which only tests allow under a launcher). A fault that never fires (copy-in
// with host memory) is known only to the rank it targets, which exits 2 while the
// other would exit 0; both enter the exit barrier, so neither waits out --timeout.
// (Only ranks with status 0 entered it, and rank 0 waited the whole --timeout for rank
// 1, gone already: found by a review.) Through the barrier each rank learns the
// others' fault outcomes, so both exit 2, as -np 2 does.
func TestExitBarrierWhateverTheStatus(t *testing.T) {
	args := []string{"-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q", "--fault", "copyin@1"}
	codes, took := launchedPairEach(t, args, args)
	t.Logf("rank 0: exit %d after %v; rank 1: exit %d after %v", codes[0], took[0], codes[1], took[1])
	require.Equal(t, []int{exitUsage, exitUsage}, codes, "the unfired fault is rank 1's, and every rank hears of it")
	require.Less(t, took[0], launchedTimeout/2, "rank 0 waited out --timeout for a rank that had left")
}

// launchedPair runs args as two launched ranks (goroutines on soft0) and returns their
// exit statuses.
func launchedPair(t *testing.T, args ...string) []int {
	codes, _ := launchedPairEach(t, args, args)
	return codes
}

// launchedTimeout is the --timeout of launchedPair's ranks.
const launchedTimeout = 20 * time.Second

// launchedPairEach is launchedPair with each rank's own arguments; it returns how long
// each rank took too.
func launchedPairEach(t *testing.T, args0, args1 []string) ([]int, []time.Duration) {
	softUnderLauncher = true
	defer func() { softUnderLauncher = false }()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	store := l.Addr().String()
	require.NoError(t, l.Close())
	codes := make([]int, 2)
	took := make([]time.Duration, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		args := args0
		if r == 1 {
			args = args1
		}
		o, err := parseOptions(append([]string{"--device", "soft0", "--timeout", launchedTimeout.String()}, args...), io.Discard)
		require.NoError(t, err)
		o.seed = 1
		env := &bootstrap.Env{Rank: r, Size: 2, Store: store, Source: bootstrap.SourceIBColl, LocalRank: r, LocalSize: 2}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			codes[r] = runLaunched(o, env)
			took[r] = time.Since(start)
		}()
	}
	wg.Wait()
	return codes, took
}

// TestAnyRankFaultLaunched: a fault of every rank (copyin@*) that fires on one rank
// only (rank 1's sim source is staged, rank 0's host source is not) is a fault the run
// tested, under a launcher as with -np: every rank exits 3 (the collective failed).
// Before, each process judged from its own rank: rank 0 called the fault unfired and
// exited 2 while rank 1 exited 3 (a review found it).
func TestAnyRankFaultLaunched(t *testing.T) {
	args := []string{"-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q", "--fault", "copyin@*", "--rank-mem", "1:sim,host"}
	code, out := capture(t, append([]string{"-np", "2"}, args...)...)
	require.Equal(t, exitCollective, code, out)
	require.Contains(t, out, "--fault copyin@*:1 fired on rank 1")
	require.Equal(t, []int{exitCollective, exitCollective}, launchedPair(t, args...))
}

// TestLaunchedRanksAgreeOnArguments: launched ranks given different arguments (-n 2
// on rank 0, -n 3 on rank 1) are refused with the usage status on both, before any
// collective; before, both ran and exited 0, with rows built from mismatched
// iterations (a review found it). Memory types may differ: -m host,host against -m
// sim,host runs.
func TestLaunchedRanksAgreeOnArguments(t *testing.T) {
	base := []string{"-c", "gather", "-b", "8", "-e", "8", "-w", "0", "-q", "--check"}
	codes, _ := launchedPairEach(t, append([]string{"-n", "2"}, base...), append([]string{"-n", "3"}, base...))
	require.Equal(t, []int{exitUsage, exitUsage}, codes)
	codes, _ = launchedPairEach(t, append([]string{"-n", "2", "-m", "host,host"}, base...), append([]string{"-n", "2", "-m", "sim,host"}, base...))
	require.Equal(t, []int{exitOK, exitOK}, codes)
}
