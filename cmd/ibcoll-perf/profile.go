package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// startProfile starts a CPU profile into path and returns what ends it: where a
// run spends its CPU (the transport's polling, the reductions, the Go scheduler's
// wake-ups) is the question behind most timings this tool prints.
func startProfile(path string) (func(), error) {
	return startRecording(path, "--cpuprofile", "CPU profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace starts a Go execution trace into path and returns what ends it. A CPU
// profile shows where the CPU goes; an iteration that takes milliseconds while no
// CPU is spent on it needs the trace instead: which goroutine waited, runnable or
// blocked, on what, and on which thread. Each timed iteration is a region named
// "iteration" on the rank's goroutine (go tool trace's user regions).
func startTrace(path string) (func(), error) {
	return startRecording(path, "--trace", "execution trace", trace.Start, trace.Stop)
}

// startRecording creates path, starts a recorder writing into it and returns what
// stops it, closes the file and says where the recording is. A recording that could
// not be written is said on stderr, naming flag, since the user asked for it.
func startRecording(path, flag, what string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return func() {
		stop()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "ibcoll-perf: %s: %v\n", flag, err)
			return
		}
		fmt.Fprintf(os.Stderr, "ibcoll-perf: %s in %s\n", what, path)
	}, nil
}
