//go:build cgo

package topology_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	nvmlmock "github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/topology"
	"github.com/ibcoll/ibcoll/topology/mock"
)

func machine(t *testing.T, name string) (*mock.Machine, *topology.Topology) {
	t.Helper()
	m, err := mock.New(name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Discover(m.Options)
	if err != nil {
		t.Fatal(err)
	}
	return m, topo
}

// Every GPU of every mock machine with a driver gets the HCA the machine's
// layout puts nearest, at the expected relation.
func TestMockMachinesPairing(t *testing.T) {
	for _, name := range []string{mock.DGXA100, mock.TwoSocket, mock.Ladder} {
		t.Run(name, func(t *testing.T) {
			m, topo := machine(t, name)
			if topo.Note != "" {
				t.Errorf("Note = %q, want none", topo.Note)
			}
			if len(topo.GPUs) != len(m.GPUPCI) {
				t.Fatalf("%d GPUs, want %d", len(topo.GPUs), len(m.GPUPCI))
			}
			for i, g := range topo.GPUs {
				if g.Index != i || g.PCI != m.GPUPCI[i] {
					t.Errorf("GPU %d: index %d at %s, want %d at %s", i, g.Index, g.PCI, i, m.GPUPCI[i])
				}
				if g.HCA != m.ExpectHCA[i] || g.Relation != m.Expect[i] {
					t.Errorf("GPU %d: %s at %v, want %s at %v (relations %v)", i, g.HCA, g.Relation, m.ExpectHCA[i], m.Expect[i], g.Relations)
				}
				h, ok := topo.HCA(g.HCA)
				if !ok || h.PCI != g.HCAPCI || h.PCI == "" {
					t.Errorf("GPU %d: hca_pci %q, HCA %+v", i, g.HCAPCI, h)
				}
				if !slices.Equal(g.Nearest, m.ExpectNearest[i]) {
					t.Errorf("GPU %d: nearest %v, want %v", i, g.Nearest, m.ExpectNearest[i])
				}
			}
		})
	}
}

// On the DGX A100 the two GPUs of a quadrant tie on its two NICs: they take
// one each, GPUs of different quadrants (different switches) never share one,
// and the storage NICs are never chosen.
func TestDGXA100Rails(t *testing.T) {
	_, topo := machine(t, mock.DGXA100)
	seen := map[string]int{}
	for _, g := range topo.GPUs {
		if g.Relation != topology.PIX && g.Relation != topology.PXB {
			t.Errorf("GPU %d: %s at %v, want PIX or PXB", g.Index, g.HCA, g.Relation)
		}
		quadrant := [][]string{{"mlx5_0", "mlx5_1"}, {"mlx5_2", "mlx5_3"}, {"mlx5_6", "mlx5_7"}, {"mlx5_8", "mlx5_9"}}[g.Index/2]
		if !slices.Equal(g.Nearest, quadrant) {
			t.Errorf("GPU %d: nearest %v, want the two NICs of its quadrant %v", g.Index, g.Nearest, quadrant)
		}
		if prev, dup := seen[g.HCA]; dup {
			t.Errorf("GPUs %d and %d share %s", prev, g.Index, g.HCA)
		}
		seen[g.HCA] = g.Index
		if g.HCA == "mlx5_4" || g.HCA == "mlx5_5" {
			t.Errorf("GPU %d got the storage NIC %s", g.Index, g.HCA)
		}
	}
	if len(topo.HCAs) != 10 {
		t.Errorf("%d HCAs, want 10", len(topo.HCAs))
	}
	for _, h := range topo.HCAs {
		if len(h.Ports) != 1 || !h.Active() || len(h.Netdevs) != 1 || h.NUMA < 0 {
			t.Errorf("HCA %+v: want one active port, a netdev and a NUMA node", h)
		}
	}
}

// Every local rank gets its own GPU and that GPU's HCA; ranks beyond the GPUs
// share them and take the GPU's other nearest HCAs in turn.
func TestPlaceEveryLocalRank(t *testing.T) {
	for _, name := range []string{mock.DGXA100, mock.TwoSocket} {
		t.Run(name, func(t *testing.T) {
			m, topo := machine(t, name)
			n := len(topo.GPUs)
			for r := 0; r < 2*n; r++ {
				p, err := topo.Place(r, "")
				if err != nil {
					t.Fatal(err)
				}
				g := topo.GPUs[r%n]
				if p.GPU != r%n || p.CUDAOrdinal != r%n || p.GPUPCI != m.GPUPCI[r%n] {
					t.Errorf("rank %d: GPU %d (ordinal %d, %s), want %d", r, p.GPU, p.CUDAOrdinal, p.GPUPCI, r%n)
				}
				// The machine's expectations, not the code's own lists: the GPU's
				// rank takes its HCA, the next rank on it the next of its nearest.
				near := m.ExpectNearest[r%n]
				want := m.ExpectHCA[r%n]
				if r >= n {
					want = near[(slices.Index(near, want)+1)%len(near)]
				}
				// The relation said is that of the HCA taken.
				rel := g.Relations[slices.IndexFunc(topo.HCAs, func(h topology.HCA) bool { return h.Name == want })]
				if p.HCA != want || p.Port != 1 || p.Basis != "pcie" || p.Relation != rel || rel != m.Expect[r%n] {
					t.Errorf("rank %d: %+v, want %s port 1 at %v", r, p, want, rel)
				}
			}
		})
	}
}

func TestPlaceCUDAVisibleDevices(t *testing.T) {
	_, topo := machine(t, mock.DGXA100)
	uuid5 := topo.GPUs[5].UUID
	cases := []struct {
		visible string
		gpus    []int // GPU of local ranks 0, 1, ...
		hcas    []string
		note    bool
	}{
		{"4,5", []int{4, 5, 4, 5}, []string{"mlx5_6", "mlx5_7", "mlx5_7", "mlx5_6"}, false},
		{"2", []int{2, 2}, []string{"mlx5_2", "mlx5_3"}, false},
		{uuid5[:12] + "," + "0", []int{5, 0}, []string{"mlx5_7", "mlx5_0"}, false},
		{"1,9,2", []int{1, 1}, []string{"mlx5_1", "mlx5_0"}, true},
		{"3,3", []int{3, 3}, []string{"mlx5_3", "mlx5_2"}, true},
	}
	for _, c := range cases {
		for r, want := range c.gpus {
			p, err := topo.Place(r, c.visible)
			if err != nil {
				t.Fatal(err)
			}
			if p.GPU != want || p.CUDAOrdinal < 0 || topo.GPUs[p.GPU].PCI != p.GPUPCI || p.HCA != c.hcas[r] {
				t.Errorf("CUDA_VISIBLE_DEVICES=%s rank %d: GPU %d -> %s, want GPU %d -> %s", c.visible, r, p.GPU, p.HCA, want, c.hcas[r])
			}
			if (p.Note != "") != c.note {
				t.Errorf("CUDA_VISIBLE_DEVICES=%s: note %q", c.visible, p.Note)
			}
		}
	}
	// Nothing visible: no GPU, placed by NUMA node, and said so.
	p, err := topo.Place(0, "9")
	if err != nil {
		t.Fatal(err)
	}
	if p.GPU != -1 || p.CUDAOrdinal != -1 || p.Basis != "numa" || p.HCA == "" || !strings.Contains(p.Note, "CUDA_VISIBLE_DEVICES") {
		t.Errorf("CUDA_VISIBLE_DEVICES=9: %+v", p)
	}
}

// Without NVML there are no GPUs; the note says why, and Place offers each rank an
// HCA of the NUMA nodes the process runs on (coll does not take it: the note no
// longer says that ranks are placed so).
func TestNoNVMLFallsBackToNUMA(t *testing.T) {
	m, topo := machine(t, mock.NoNVML)
	if len(topo.GPUs) != 0 {
		t.Fatalf("%d GPUs without NVML", len(topo.GPUs))
	}
	if !strings.Contains(topo.Note, "NVML") || strings.Contains(topo.Note, "placed") {
		t.Errorf("Note = %q, want it to say NVML is missing, and nothing of placing", topo.Note)
	}
	for r := 0; r < 3; r++ {
		p, err := topo.Place(r, "")
		if err != nil {
			t.Fatal(err)
		}
		if p.HCA != "mlx5_1" || p.Basis != "numa" || p.GPU != -1 || p.Note == "" {
			t.Errorf("rank %d on node 1's CPUs: %+v, want mlx5_1 by NUMA", r, p)
		}
	}
	// A process on every CPU: ranks alternate between the nodes' HCAs.
	o := m.Options
	o.CPUs = nil
	for n := 0; n < 64; n++ {
		o.CPUs = append(o.CPUs, n)
	}
	all, err := topology.Discover(o)
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range []string{"mlx5_0", "mlx5_1", "mlx5_0", "mlx5_1"} {
		if p, _ := all.Place(r, ""); p.HCA != want {
			t.Errorf("rank %d on all CPUs: %s, want %s", r, p.HCA, want)
		}
	}
}

func TestBadInput(t *testing.T) {
	_, topo := machine(t, mock.TwoSocket)
	if _, err := topo.Place(-1, ""); err == nil || !strings.Contains(err.Error(), "localRank") {
		t.Errorf("Place(-1): %v, want an error naming localRank", err)
	}
	var nilTopo *topology.Topology
	if _, err := nilTopo.Place(0, ""); err == nil {
		t.Error("nil Topology: no error")
	}
	if _, err := topology.NVML(nil).GPUs(); err == nil {
		t.Error("NVML(nil): no error")
	}
	if _, err := mock.New("dgx-z9000", t.TempDir()); err == nil {
		t.Error("unknown mock machine: no error")
	}
}

// An NVML that fails, or a mock that lacks a function, gives no GPUs and a
// note; it never panics.
func TestNVMLFailures(t *testing.T) {
	dir := t.TempDir()
	failing := &nvmlmock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	incomplete := &nvmlmock.Interface{InitFunc: func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc: func() nvml.Return { return nvml.SUCCESS }}
	for name, lib := range map[string]nvml.Interface{"driver not loaded": failing, "incomplete mock": incomplete} {
		topo, err := topology.Discover(topology.Options{Root: dir, GPUs: topology.NVML(lib)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(topo.GPUs) != 0 || !strings.Contains(topo.Note, "NVML") {
			t.Errorf("%s: %d GPUs, note %q", name, len(topo.GPUs), topo.Note)
		}
	}
}

// A virtual HCA (rxe: no PCI function) is listed but has no relation, and a
// GPU whose PCI node is missing is listed with a note.
func TestUnplacedDevices(t *testing.T) {
	m, err := mock.New(mock.TwoSocket, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rxe := filepath.Join(m.Options.Root, "devices", "virtual", "infiniband", "rxe0")
	if err := os.MkdirAll(filepath.Join(rxe, "ports", "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rxe, "ports", "1", "state"), []byte("4: ACTIVE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/virtual/infiniband/rxe0", filepath.Join(m.Options.Root, "class", "infiniband", "rxe0")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(m.Options.Root, "bus", "pci", "devices", m.GPUPCI[3])); err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Discover(m.Options)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := topo.HCA("rxe0")
	if !ok || h.PCI != "" || !h.Active() {
		t.Fatalf("rxe0: %+v, %v", h, ok)
	}
	for _, g := range topo.GPUs[:3] {
		if g.HCA != m.ExpectHCA[g.Index] || g.Relations[slices.IndexFunc(topo.HCAs, func(h topology.HCA) bool { return h.Name == "rxe0" })] != topology.Unknown {
			t.Errorf("GPU %d: %s, relations %v", g.Index, g.HCA, g.Relations)
		}
	}
	g3 := topo.GPUs[3]
	if g3.HCA != "" || g3.Relation != topology.Unknown || !strings.Contains(topo.Note, "GPU 3") {
		t.Errorf("unplaced GPU 3: %+v, note %q", g3, topo.Note)
	}
	if p, _ := topo.Place(3, ""); p.GPU != 3 || p.HCA != "" || p.Note == "" {
		t.Errorf("rank 3 on the unplaced GPU: %+v", p)
	}
}

// A root without sysfs has nothing, and says so.
func TestEmptyRoot(t *testing.T) {
	topo, err := topology.Discover(topology.Options{Root: t.TempDir(), GPUs: topology.NoGPUs("none here")})
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.HCAs) != 0 || len(topo.GPUs) != 0 || !strings.Contains(topo.Note, "no RDMA device") {
		t.Errorf("%+v", topo)
	}
	p, err := topo.Place(0, "")
	if err != nil || p.HCA != "" || p.Basis != "none" {
		t.Errorf("Place: %+v, %v", p, err)
	}
}

// TestLadderNearestActive walks one GPU down a ladder of NICs at every relation:
// it takes the nearest NIC with an active port (PIX, then PXB, PHB, NODE, SYS as
// nearer ones go down), and when no port is active, the nearest of all. Neither
// the order nor the port rule was exercised by the other machines, whose GPUs see
// one relation below SYS and only active ports.
func TestLadderNearestActive(t *testing.T) {
	m, topo := machine(t, mock.Ladder)
	require.Len(t, topo.GPUs, 1)
	var names []string
	for _, h := range topo.HCAs {
		names = append(names, h.Name)
	}
	require.Equal(t, []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4"}, names)
	require.Equal(t, []topology.Relation{topology.PIX, topology.PXB, topology.PHB, topology.NODE, topology.SYS}, topo.GPUs[0].Relations)
	g := topo.GPUs[0]
	require.Equal(t, "mlx5_1", g.HCA, "mlx5_0 is nearer, but its port is down")
	require.Equal(t, topology.PXB, g.Relation)

	rediscover := func() topology.GPU {
		t.Helper()
		tp, err := topology.Discover(m.Options)
		require.NoError(t, err)
		return tp.GPUs[0]
	}
	require.NoError(t, m.PortState("mlx5_0", "4: ACTIVE"))
	g = rediscover()
	require.Equal(t, "mlx5_0", g.HCA)
	require.Equal(t, topology.PIX, g.Relation)
	require.NoError(t, m.PortState("mlx5_0", "1: DOWN"))
	for i, want := range []topology.Relation{topology.PHB, topology.NODE, topology.SYS} {
		require.NoError(t, m.PortState(names[i+1], "1: DOWN"))
		g = rediscover()
		require.Equal(t, names[i+2], g.HCA, "with %v down", names[:i+2])
		require.Equal(t, want, g.Relation)
		require.Equal(t, []string{names[i+2]}, g.Nearest)
	}
	require.NoError(t, m.PortState("mlx5_4", "1: DOWN"))
	g = rediscover()
	require.Equal(t, "mlx5_0", g.HCA, "no port active: the nearest of all")
}
