//go:build cgo

package mock

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/ibcoll/ibcoll/topology"
)

// The machines, by the name --mock takes.
const (
	// DGXA100 is a DGX A100: 8 A100 GPUs and 8 compute NICs (mlx5_0-3, mlx5_6-9)
	// in four quadrants of two levels of PCIe switches, each quadrant's two GPUs
	// on one second-level switch and its two NICs on another (so every GPU is PXB
	// from both NICs of its quadrant, as nvidia-smi shows on the real machine),
	// plus a dual-port storage NIC (mlx5_4, mlx5_5) on a root port of its own.
	DGXA100 = "dgx-a100"
	// TwoSocket has 2 GPUs and 1 NIC per NUMA node: on node 0 GPU 0 and mlx5_0 share
	// a switch (PIX) and GPU 1 is on another root port (PHB); on node 1 GPU 2 is
	// on another root complex than mlx5_1 (NODE) and GPU 3 on its root complex (PHB).
	TwoSocket = "2socket"
	// NoNVML is TwoSocket without a driver: NVML cannot load, so there are no
	// GPUs to place by, and the process's CPUs are those of NUMA node 1.
	NoNVML = "no-nvml"
	// Ladder has one GPU and one NIC at each relation to it: mlx5_0 PIX (its port
	// DOWN), mlx5_1 PXB, mlx5_2 PHB, mlx5_3 NODE, mlx5_4 SYS; the tests take ports
	// down one by one (Machine.PortState) to walk the GPU down the ladder.
	Ladder = "ladder"
)

// Names lists the machines.
func Names() []string { return []string{DGXA100, TwoSocket, NoNVML, Ladder} }

// Machine is a fake machine whose sysfs tree lies under Options.Root.
type Machine struct {
	Name string
	// Options discover it: topology.Discover(m.Options).
	Options topology.Options
	// GPUPCI is each GPU's PCI address, by NVML index; ExpectHCA the HCA that
	// each GPU should get: what the tests assert.
	GPUPCI    []string
	ExpectHCA []string
	// Expect is the relation of each GPU to its HCA.
	Expect []topology.Relation
	// ExpectNearest is each GPU's nearest HCAs (in HCA order), which the ranks
	// that share the GPU take in turn.
	ExpectNearest [][]string
}

// PortState writes the state of port 1 of RDMA device ib ("4: ACTIVE", "1: DOWN")
// into the machine's tree.
func (m *Machine) PortState(ib, state string) error {
	return os.WriteFile(filepath.Join(m.Options.Root, "class", "infiniband", ib, "ports", "1", "state"), []byte(state+"\n"), 0o644)
}

// New writes machine name's sysfs tree under dir (which must exist and be
// empty) and returns it with its NVML mock.
func New(name, dir string) (*Machine, error) {
	var (
		t   tree
		m   = &Machine{Name: name}
		cfg = gpus.A100_SXM4_40GB
	)
	switch name {
	case DGXA100:
		t = dgxA100Tree()
		m.GPUPCI = []string{"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0",
			"0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"}
		m.ExpectHCA = []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"}
		m.Expect = slices.Repeat([]topology.Relation{topology.PXB}, 8)
		for q := range 4 {
			quad := []string{m.ExpectHCA[2*q], m.ExpectHCA[2*q+1]}
			m.ExpectNearest = append(m.ExpectNearest, quad, quad)
		}
	case TwoSocket, NoNVML:
		t = twoSocketTree()
		m.GPUPCI = []string{"0000:1b:00.0", "0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"}
		m.ExpectHCA = []string{"mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1"}
		m.Expect = []topology.Relation{topology.PIX, topology.PHB, topology.NODE, topology.PHB}
		m.ExpectNearest = [][]string{{"mlx5_0"}, {"mlx5_0"}, {"mlx5_1"}, {"mlx5_1"}}
		cfg = gpus.H100_SXM5_80GB
	case Ladder:
		t = ladderTree()
		m.GPUPCI = []string{"0000:04:00.0"}
		m.ExpectHCA = []string{"mlx5_1"} // mlx5_0, nearer, has its port down
		m.Expect = []topology.Relation{topology.PXB}
		m.ExpectNearest = [][]string{{"mlx5_1"}}
		cfg = gpus.H100_SXM5_80GB
	default:
		return nil, fmt.Errorf("mock: unknown machine %q (known: %v)", name, Names())
	}
	if err := t.write(dir); err != nil {
		return nil, fmt.Errorf("mock: %s: %w", name, err)
	}
	m.Options.Root = dir
	m.Options.CPUs = allCPUs(t)
	if name == NoNVML {
		m.Options.GPUs = topology.NoGPUs("libnvidia-ml.so.1 not found (mock machine without a driver)")
		m.Options.CPUs = mustCPUs(t.numa[1])
		m.GPUPCI, m.ExpectHCA, m.Expect, m.ExpectNearest = nil, nil, nil, nil
		return m, nil
	}
	m.Options.GPUs = topology.NVML(nvmlServer(cfg, m.GPUPCI))
	return m, nil
}

// nvmlServer is go-nvml's mock server with len(pci) GPUs of cfg at those PCI
// addresses: the stock mock numbers them 0000:00:00.0 upwards and leaves the
// bus id out of GetPciInfo.
func nvmlServer(cfg gpus.Config, pci []string) nvml.Interface {
	var s *server.Server
	if cfg.Name == gpus.A100_SXM4_40GB.Name {
		s = dgxa100.NewWithGPUs(gpus.Multiple(len(pci), cfg)...)
	} else {
		s, _ = server.New(server.WithGPUs(gpus.Multiple(len(pci), cfg)...))
	}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.PciBusID = pci[i]
		var bus uint32
		fmt.Sscanf(pci[i][5:7], "%x", &bus)
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{Domain: 0, Bus: bus, PciDeviceId: cfg.PciDeviceId}
			// NVML writes the domain with 8 digits.
			for j, c := range "0000" + pci[i] {
				p.BusId[j] = int8(c)
			}
			return p, nvml.SUCCESS
		}
	}
	return s
}

func dgxA100Tree() tree {
	t := tree{numa: map[int]string{}}
	for n := 0; n < 8; n++ {
		t.numa[n] = fmt.Sprintf("%d-%d,%d-%d", 16*n, 16*n+15, 128+16*n, 128+16*n+15)
	}
	// One quadrant: a root port, a first-level switch (upstream port, and
	// two downstream ports), a second-level switch under each downstream port with
	// the two GPUs on one and the two NICs on the other.
	// The bridges sit on devices 0x10-0x15 of the quadrant's first bus b, so that no
	// bridge shares an address with an endpoint (whose device is 0), and the root
	// port is a function of its host bridge's bus.
	quad := func(hb string, b int, numa int, gpuAddrs, nicAddrs, nics [2]string) {
		rp := hb[3:] + ":01.1"
		up := fmt.Sprintf("0000:%02x:10.0", b)
		down := func(i int) string { return fmt.Sprintf("0000:%02x:11.%d", b, i) }
		sw2 := func(i int) (string, string, string) {
			return fmt.Sprintf("0000:%02x:%02x.0", b, 0x12+2*i), fmt.Sprintf("0000:%02x:%02x.0", b, 0x13+2*i),
				fmt.Sprintf("0000:%02x:%02x.1", b, 0x13+2*i)
		}
		gu, gd0, gd1 := sw2(0)
		nu, nd0, nd1 := sw2(1)
		for i, a := range gpuAddrs {
			d := []string{gd0, gd1}[i]
			t.eps = append(t.eps, endpoint{addr: a, path: []string{hb, rp, up, down(0), gu, d}, numa: numa, class: classGPU})
		}
		for i, a := range nicAddrs {
			d := []string{nd0, nd1}[i]
			t.eps = append(t.eps, endpoint{addr: a, path: []string{hb, rp, up, down(1), nu, d}, numa: numa, class: classIB,
				ib: nics[i], net: "ib" + nics[i][5:], link: "InfiniBand"})
		}
	}
	quad("pci0000:00", 0x01, 3, [2]string{"0000:07:00.0", "0000:0f:00.0"}, [2]string{"0000:0c:00.0", "0000:12:00.0"}, [2]string{"mlx5_0", "mlx5_1"})
	quad("pci0000:40", 0x41, 1, [2]string{"0000:47:00.0", "0000:4e:00.0"}, [2]string{"0000:4b:00.0", "0000:54:00.0"}, [2]string{"mlx5_2", "mlx5_3"})
	quad("pci0000:80", 0x81, 7, [2]string{"0000:87:00.0", "0000:90:00.0"}, [2]string{"0000:8d:00.0", "0000:94:00.0"}, [2]string{"mlx5_6", "mlx5_7"})
	quad("pci0000:b0", 0xb1, 5, [2]string{"0000:b7:00.0", "0000:bd:00.0"}, [2]string{"0000:ba:00.0", "0000:cc:00.0"}, [2]string{"mlx5_8", "mlx5_9"})
	// The storage NIC: both functions of one card on a root port of NUMA node 4.
	for i, a := range []string{"0000:e1:00.0", "0000:e1:00.1"} {
		t.eps = append(t.eps, endpoint{addr: a, path: []string{"pci0000:e0", "0000:e0:03.1"}, numa: 4, class: classEth,
			ib: fmt.Sprintf("mlx5_%d", 4+i), net: fmt.Sprintf("enp225s0f%d", i), link: "Ethernet"})
	}
	return t
}

func ladderTree() tree {
	t := tree{numa: map[int]string{0: "0-3", 1: "4-7"}}
	nic := func(addr, ib string, numa int, down bool, path ...string) endpoint {
		return endpoint{addr: addr, path: path, numa: numa, class: classIB, ib: ib, net: "ib" + ib[5:], link: "InfiniBand", down: down}
	}
	t.eps = []endpoint{
		{addr: "0000:04:00.0", path: []string{"pci0000:00", "0000:00:01.0", "0000:02:00.0", "0000:03:00.0"}, numa: 0, class: classGPU},
		// One switch between them: PIX.
		nic("0000:05:00.0", "mlx5_0", 0, true, "pci0000:00", "0000:00:01.0", "0000:02:00.0", "0000:03:01.0"),
		// Under the same switch, through a second one: PXB.
		nic("0000:08:00.0", "mlx5_1", 0, false, "pci0000:00", "0000:00:01.0", "0000:02:00.0", "0000:03:02.0", "0000:06:00.0", "0000:07:00.0"),
		// Another root port of the host bridge: PHB.
		nic("0000:09:00.0", "mlx5_2", 0, false, "pci0000:00", "0000:00:03.0"),
		// Another root complex of NUMA node 0: NODE.
		nic("0000:11:00.0", "mlx5_3", 0, false, "pci0000:10", "0000:10:01.0"),
		// NUMA node 1: SYS.
		nic("0000:81:00.0", "mlx5_4", 1, false, "pci0000:80", "0000:80:01.0"),
	}
	return t
}

func twoSocketTree() tree {
	t := tree{numa: map[int]string{0: "0-15,32-47", 1: "16-31,48-63"}}
	t.eps = []endpoint{
		// Node 0: GPU 0 and mlx5_0 behind one switch; GPU 1 on another root port.
		{addr: "0000:1b:00.0", path: []string{"pci0000:00", "0000:00:01.0", "0000:18:00.0", "0000:19:00.0"}, numa: 0, class: classGPU},
		{addr: "0000:1c:00.0", path: []string{"pci0000:00", "0000:00:01.0", "0000:18:00.0", "0000:19:04.0"}, numa: 0, class: classIB,
			ib: "mlx5_0", net: "ib0", link: "InfiniBand"},
		{addr: "0000:3b:00.0", path: []string{"pci0000:00", "0000:00:03.0"}, numa: 0, class: classGPU},
		// Node 1: mlx5_1 and GPU 3 on root complex 0000:a0, GPU 2 on 0000:80.
		{addr: "0000:86:00.0", path: []string{"pci0000:80", "0000:80:01.0"}, numa: 1, class: classGPU},
		{addr: "0000:af:00.0", path: []string{"pci0000:a0", "0000:a0:01.0"}, numa: 1, class: classGPU},
		{addr: "0000:b1:00.0", path: []string{"pci0000:a0", "0000:a0:03.0"}, numa: 1, class: classIB,
			ib: "mlx5_1", net: "ib1", link: "InfiniBand"},
	}
	return t
}

func allCPUs(t tree) []int {
	var out []int
	for _, s := range t.numa {
		out = append(out, mustCPUs(s)...)
	}
	sort.Ints(out)
	return out
}

func mustCPUs(s string) []int {
	c, err := topology.ParseCPUList(s)
	if err != nil {
		panic(err) // the lists above are constants
	}
	return c
}
