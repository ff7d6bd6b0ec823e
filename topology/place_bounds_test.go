package topology_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/topology"
)

// TestPlaceBounds: Place on a Topology built by hand (its fields are exported and
// JSON-tagged) and with local ranks at the edge. A huge local rank took its GPU's
// nearest HCAs in turn with an index that overflowed (a panic, index -2); a GPU with an
// HCA and no nearest list divided by zero for its second rank; an HCA the topology does
// not list gave an empty placement. Now: the turn wraps, a GPU without a nearest list
// keeps its HCA, and the unknown HCA is an error naming it (a review found all three).
func TestPlaceBounds(t *testing.T) {
	hcas := []topology.HCA{
		{Name: "mlx5_0", PCI: "0000:05:00.0", Ports: []topology.Port{{Num: 1, State: "ACTIVE"}}},
		{Name: "mlx5_1", PCI: "0000:06:00.0", Ports: []topology.Port{{Num: 1, State: "ACTIVE"}}},
		{Name: "mlx5_2", PCI: "0000:07:00.0", Ports: []topology.Port{{Num: 1, State: "ACTIVE"}}},
	}
	topo := &topology.Topology{HCAs: hcas, GPUs: []topology.GPU{{Index: 0, PCI: "0000:03:00.0", HCA: "mlx5_1",
		Nearest: []string{"mlx5_0", "mlx5_1", "mlx5_2"}, Relation: topology.PIX}}}
	for _, lr := range []int{0, 1, 2, 3, math.MaxInt, math.MaxInt - 1} {
		p, err := topo.Place(lr, "")
		require.NoError(t, err, "local rank %d", lr)
		// Rank r takes the nearest list from the GPU's own HCA on, r places along.
		want := []string{"mlx5_0", "mlx5_1", "mlx5_2"}[(1+lr%3)%3]
		require.Equal(t, want, p.HCA, "local rank %d", lr)
	}

	bare := &topology.Topology{HCAs: hcas, GPUs: []topology.GPU{{Index: 0, PCI: "0000:03:00.0", HCA: "mlx5_2", Relation: topology.PIX}}}
	for lr := range 3 {
		p, err := bare.Place(lr, "")
		require.NoError(t, err, "local rank %d", lr)
		require.Equal(t, "mlx5_2", p.HCA, "a GPU without a nearest list keeps its HCA")
	}

	unknown := &topology.Topology{HCAs: hcas, GPUs: []topology.GPU{{Index: 0, PCI: "0000:03:00.0", HCA: "mlx5_9", Relation: topology.PIX}}}
	_, err := unknown.Place(0, "")
	require.ErrorContains(t, err, `HCA "mlx5_9" is not among the topology's HCAs`)
}
