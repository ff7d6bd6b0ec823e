package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfile starts a CPU profile into path and returns what ends it: where a
// run spends its CPU (the transport's polling, the reductions, the Go scheduler's
// wake-ups) is the question behind most timings this tool prints. A profile that
// could not be written is said on stderr, since the user asked for it.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "ibcoll-perf: --cpuprofile:", err)
			return
		}
		fmt.Fprintf(os.Stderr, "ibcoll-perf: CPU profile in %s\n", path)
	}, nil
}

// startTrace starts a Go execution trace into path and returns what ends it. A CPU
// profile shows where the CPU goes; an iteration that takes milliseconds while no
// CPU is spent on it needs the trace instead: which goroutine waited, runnable or
// blocked, on what, and on which thread. Each timed iteration is a region named
// "iteration" on the rank's goroutine (go tool trace's user regions).
func startTrace(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return func() {
		trace.Stop()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "ibcoll-perf: --trace:", err)
			return
		}
		fmt.Fprintf(os.Stderr, "ibcoll-perf: execution trace in %s\n", path)
	}, nil
}
