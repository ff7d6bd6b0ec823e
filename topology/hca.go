package topology

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/Mellanox/rdmamap"
)

// HCA is one RDMA device as sysfs shows it.
type HCA struct {
	Name    string   `json:"name"`
	PCI     string   `json:"pci,omitempty"` // "" for a virtual device (rxe, siw)
	NUMA    int      `json:"numa"`
	Ports   []Port   `json:"ports"`
	Netdevs []string `json:"netdevs,omitempty"`

	node *pciNode
}

// Port is one port of an HCA.
type Port struct {
	Num       int    `json:"num"`
	State     string `json:"state"`      // "ACTIVE", "DOWN", ...
	LinkLayer string `json:"link_layer"` // "InfiniBand", "Ethernet"
}

// Active reports whether the port can carry traffic.
func (p Port) Active() bool { return p.State == "ACTIVE" }

// ActivePort is the first active port, else the first port, else 1: the one
// the transport uses.
func (h HCA) ActivePort() int {
	for _, p := range h.Ports {
		if p.Active() {
			return p.Num
		}
	}
	if len(h.Ports) > 0 {
		return h.Ports[0].Num
	}
	return 1
}

// Active reports whether some port is active.
func (h HCA) Active() bool {
	for _, p := range h.Ports {
		if p.Active() {
			return true
		}
	}
	return false
}

// rdmamapMu guards rdmamap's package variables, which Discover points at its
// root for the time of a read.
var rdmamapMu sync.Mutex

// readHCAs lists the RDMA devices under root through rdmamap, with what sysfs
// says of their ports, PCI function and netdevs.
func readHCAs(root string) []HCA {
	rdmamapMu.Lock()
	class, pci := rdmamap.RdmaClassDir, rdmamap.PciDevDir
	rdmamap.RdmaClassDir = filepath.Join(root, "class", "infiniband")
	rdmamap.PciDevDir = filepath.Join(root, "bus", "pci", "devices")
	defer func() {
		rdmamap.RdmaClassDir, rdmamap.PciDevDir = class, pci
		rdmamapMu.Unlock()
	}()

	var out []HCA
	for _, name := range rdmamap.GetRdmaDeviceList() {
		h := HCA{Name: name, NUMA: -1}
		dev := filepath.Join(rdmamap.RdmaClassDir, name, "device")
		if target, err := filepath.EvalSymlinks(dev); err == nil {
			if a := NormalizePCI(filepath.Base(target)); a != "" && belongsTo(name, a) {
				h.PCI = a
				h.NUMA = readInt(filepath.Join(target, "numa_node"), -1)
				if ents, err := os.ReadDir(filepath.Join(target, "net")); err == nil {
					for _, e := range ents {
						h.Netdevs = append(h.Netdevs, e.Name())
					}
				}
			}
		}
		for _, p := range rdmamap.GetPorts(name) {
			num, err := strconv.Atoi(p)
			if err != nil || num < 1 {
				continue
			}
			dir := filepath.Join(rdmamap.RdmaClassDir, name, "ports", p)
			st := readString(filepath.Join(dir, "state"))
			if _, s, ok := strings.Cut(st, ":"); ok {
				st = strings.TrimSpace(s)
			}
			h.Ports = append(h.Ports, Port{Num: num, State: st, LinkLayer: readString(filepath.Join(dir, "link_layer"))})
		}
		sort.Slice(h.Ports, func(i, j int) bool { return h.Ports[i].Num < h.Ports[j].Num })
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return naturalLess(out[i].Name, out[j].Name) })
	return out
}

// belongsTo checks through rdmamap's PCI-to-RDMA map that the PCI function
// really carries the device (a device link can point at a parent that is not
// the NIC, as for virtual functions in some containers).
func belongsTo(name, addr string) bool {
	for _, d := range rdmamap.GetRdmaDevicesForPcidev(addr) {
		if d == name {
			return true
		}
	}
	return false
}

// naturalLess orders "mlx5_2" before "mlx5_10".
func naturalLess(a, b string) bool {
	ap, an := splitNum(a)
	bp, bn := splitNum(b)
	if ap != bp {
		return ap < bp
	}
	if an != bn {
		return an < bn
	}
	return a < b
}

func splitNum(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, -1
	}
	return s[:i], n
}
