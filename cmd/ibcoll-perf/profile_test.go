package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCPUProfile: --cpuprofile writes a profile that go tool pprof reads, says where,
// and a file it cannot create is a usage error naming the flag.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	code, out := capture(t, "-np", "2", "-c", "gather", "-b", "1K", "-e", "1K", "-n", "200", "-q", "--cpuprofile", path)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "CPU profile in "+path)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Positive(t, st.Size(), "an empty profile")
	// A pprof file is gzip-compressed protobuf.
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "not a gzip-compressed profile")

	code, out = capture(t, "-np", "2", "-c", "gather", "-b", "1K", "-e", "1K", "-n", "1", "-q",
		"--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.prof"))
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "--cpuprofile")
}

// TestTrace: --trace writes a Go execution trace (its header names the format) with
// one "iteration" region per timed iteration and rank, says where, and a file it cannot
// create is a usage error naming the flag.
func TestTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.trace")
	code, out := capture(t, "-np", "2", "-c", "gather", "-b", "1K", "-e", "1K", "-n", "50", "-w", "2", "-q", "--trace", path)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "execution trace in "+path)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("go 1.")), "not a Go execution trace: %q", b[:min(len(b), 16)])
	require.Contains(t, string(b), "iteration", "no iteration region named in the trace")

	code, out = capture(t, "-np", "2", "-c", "gather", "-b", "1K", "-e", "1K", "-n", "1", "-q",
		"--trace", filepath.Join(t.TempDir(), "no", "such", "dir", "run.trace"))
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "--trace")
}
