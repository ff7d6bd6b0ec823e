//go:build cgo

package mock

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// endpoint is one PCI function of a fake machine.
type endpoint struct {
	addr  string
	path  []string // host bridge ("pci0000:00"), then the bridges from the root port down
	numa  int
	class string // "0x030200" a 3D controller (GPU), "0x020700" an InfiniBand controller
	ib    string // RDMA device name, for a NIC
	net   string // its netdev
	link  string // its port's link layer
	down  bool   // its port is DOWN, not ACTIVE
}

const (
	classGPU = "0x030200"
	classIB  = "0x020700"
	classEth = "0x020000"
	vendorNV = "0x10de"
	vendorMX = "0x15b3"
)

// tree is a fake sysfs: endpoints and the CPUs of each NUMA node.
type tree struct {
	eps  []endpoint
	numa map[int]string // node → cpulist
}

// write lays the tree out under root as the kernel does: devices/<host
// bridge>/<bridges...>/<addr>, bus/pci/devices/<addr> links into it, and
// class/infiniband/<dev> links to the NIC's infiniband/<dev> directory.
func (t tree) write(root string) error {
	mk := func(dir string) error { return os.MkdirAll(dir, 0o755) }
	put := func(name, val string) error {
		if err := mk(filepath.Dir(name)); err != nil {
			return err
		}
		return os.WriteFile(name, []byte(val+"\n"), 0o644)
	}
	link := func(target, name string) error {
		if err := mk(filepath.Dir(name)); err != nil {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(name), target)
		if err != nil {
			return err
		}
		if err := os.Symlink(rel, name); err != nil && !os.IsExist(err) {
			return err
		}
		return nil
	}
	busDir := filepath.Join(root, "bus", "pci", "devices")
	for _, e := range t.eps {
		dir := filepath.Join(root, "devices")
		for i, c := range e.path {
			dir = filepath.Join(dir, c)
			if i == 0 {
				continue
			}
			// A bridge: a PCI function of its own.
			if err := put(filepath.Join(dir, "numa_node"), fmt.Sprint(e.numa)); err != nil {
				return err
			}
			if err := put(filepath.Join(dir, "class"), "0x060400"); err != nil {
				return err
			}
			if err := link(dir, filepath.Join(busDir, c)); err != nil {
				return err
			}
		}
		dir = filepath.Join(dir, e.addr)
		vendor := vendorNV
		if e.ib != "" {
			vendor = vendorMX
		}
		for name, val := range map[string]string{"numa_node": fmt.Sprint(e.numa), "class": e.class, "vendor": vendor} {
			if err := put(filepath.Join(dir, name), val); err != nil {
				return err
			}
		}
		if err := link(dir, filepath.Join(busDir, e.addr)); err != nil {
			return err
		}
		if e.ib == "" {
			continue
		}
		ibDir := filepath.Join(dir, "infiniband", e.ib)
		if err := link(dir, filepath.Join(ibDir, "device")); err != nil {
			return err
		}
		// A GUID unique per function: the bus and function of its address.
		guid := "0c42:a103:00" + e.addr[5:7] + ":00" + strings.ReplaceAll(e.addr[11:], ".", "0")
		if err := put(filepath.Join(ibDir, "node_guid"), guid); err != nil {
			return err
		}
		port := filepath.Join(ibDir, "ports", "1")
		state := "4: ACTIVE"
		if e.down {
			state = "1: DOWN"
		}
		if err := put(filepath.Join(port, "state"), state); err != nil {
			return err
		}
		if err := put(filepath.Join(port, "link_layer"), e.link); err != nil {
			return err
		}
		if err := mk(filepath.Join(dir, "net", e.net)); err != nil {
			return err
		}
		if err := link(ibDir, filepath.Join(root, "class", "infiniband", e.ib)); err != nil {
			return err
		}
	}
	for n, cpus := range t.numa {
		if err := put(filepath.Join(root, "devices", "system", "node", fmt.Sprintf("node%d", n), "cpulist"), cpus); err != nil {
			return err
		}
	}
	return nil
}
