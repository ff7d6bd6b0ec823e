package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
)

// TestPathHeader: the header says the QP path settings the environment gave, and
// nothing where none is set; an out-of-range value is refused naming the variable.
func TestPathHeader(t *testing.T) {
	args := []string{"-np", "2", "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "--check"}
	code, out := capture(t, args...)
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "# path:")

	t.Setenv("IBCOLL_TRAFFIC_CLASS", "106")
	t.Setenv("IBCOLL_SERVICE_LEVEL", "3")
	code, out = capture(t, args...)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "# path: traffic class 106 ($IBCOLL_TRAFFIC_CLASS), service level 3 ($IBCOLL_SERVICE_LEVEL), partition key index 0 ($IBCOLL_PKEY_INDEX)")

	t.Setenv("IBCOLL_SERVICE_LEVEL", "16")
	code, out = capture(t, args...)
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "IBCOLL_SERVICE_LEVEL")
}

// TestGPUDirectHeader: a run where some rank uses GPU memory says how this GPU orders
// the NIC's writes into it and whether the transport flushes them, as mem reads it; a
// run on host memory says nothing of it. The GPU half runs where CUDA is (the GPU
// machine requires it).
func TestGPUDirectHeader(t *testing.T) {
	args := []string{"-np", "2", "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "--check"}
	code, out := capture(t, args...)
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "# gpudirect:")

	testutil.RequireCUDA(t, mem.CUDAAvailable(), "no CUDA device: the GPU half is not checked")
	g, err := mem.GPUDirectWriteOrdering()
	require.NoError(t, err)
	code, out = capture(t, append(args, "-m", "host,cuda")...)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, fmt.Sprintf("(CUDA attribute 118 = %d), host flush %v: ", g.Ordering, g.CanFlush))
	t.Logf("%s", out)
}
