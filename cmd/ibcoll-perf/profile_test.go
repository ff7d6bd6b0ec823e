package main

import (
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
