package coll

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpinFreeFor: a waiter polls on free cores for spinFreeOwnCore only where the
// launcher says how many processes share the node and the node has a core for each;
// unknown or oversubscribed, for spinFree.
func TestSpinFreeFor(t *testing.T) {
	require.Greater(t, spinFreeOwnCore, spinFree, "the own-core spin is the longer one")
	cpus := runtime.NumCPU()
	for _, c := range []struct {
		local int
		want  string
	}{{0, "short"}, {1, "long"}, {cpus, "long"}, {cpus + 1, "short"}, {64 * cpus, "short"}} {
		got := spinFreeFor(&Config{LocalSize: c.local})
		want := spinFree
		if c.want == "long" {
			want = spinFreeOwnCore
		}
		require.Equal(t, want, got, "LocalSize %d on %d CPUs", c.local, cpus)
	}
}
