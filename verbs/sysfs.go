package verbs

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// The sysfs reader describes RDMA devices from /sys/class/infiniband: what
// libibverbs does not say (PCI address, NUMA node; GID types and their netdevs
// where its GID table query is missing, fillGIDs), and enough of the rest (port
// state, link layer, LID, GID tables) to describe a device that cannot be
// opened. It reads through an fs.FS rooted at sysfs (os.DirFS("/sys") in
// production, fake trees in tests), so the code that tests run is the code that
// reads the real /sys; it needs no cgo.

// sysfsDevice is what sysfs says about one device. Ports carry no ActiveMTU:
// sysfs has none, ibv_query_port has it.
type sysfsDevice struct {
	Name     string
	NodeGUID uint64
	Ports    []PortInfo
	Netdev   string
	PCIAddr  string
	NUMANode int
}

// info converts the sysfs view to a DeviceInfo of the ibv provider.
func (d sysfsDevice) info() DeviceInfo {
	return DeviceInfo{
		Name:     d.Name,
		Provider: "ibv",
		NodeGUID: d.NodeGUID,
		Ports:    d.Ports,
		Netdev:   d.Netdev,
		PCIAddr:  d.PCIAddr,
		NUMANode: d.NUMANode,
	}
}

// ibClassDir is where sysfs lists RDMA devices, relative to its root.
const ibClassDir = "class/infiniband"

// listSysfsDevices returns the names of the RDMA devices in sysfs, sorted.
// A tree without RDMA devices (or without an infiniband class at all, as
// on hosts whose kernel lacks RDMA) has none, and that is no error.
func listSysfsDevices(sysfs fs.FS) ([]string, error) {
	ents, err := fs.ReadDir(sysfs, ibClassDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		// Real sysfs has symlinks here; fake trees may have directories.
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// listSysfsPorts returns a device's port numbers in ascending order.
func listSysfsPorts(sysfs fs.FS, name string) ([]int, error) {
	ents, err := fs.ReadDir(sysfs, path.Join(ibClassDir, name, "ports"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var ports []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 {
			ports = append(ports, n)
		}
	}
	sort.Ints(ports)
	return ports, nil
}

// readSysfsDevice reads everything sysfs says about the device name. Only
// a missing device directory or an unreadable node_guid is an error: every
// other attribute is optional, because kernels and providers differ in
// what they publish.
func readSysfsDevice(sysfs fs.FS, name string) (sysfsDevice, error) {
	return readSysfsDeviceGIDs(sysfs, name, true)
}

// readSysfsDeviceGIDs is readSysfsDevice, with the GID tables only if gids: an
// opened device gives them in one call (fillGIDs), where sysfs takes a file per
// slot.
func readSysfsDeviceGIDs(sysfs fs.FS, name string, gids bool) (sysfsDevice, error) {
	d := sysfsDevice{Name: name, NUMANode: -1}
	if !fs.ValidPath(name) || strings.Contains(name, "/") {
		return d, fmt.Errorf("sysfs: device %q: %w", name, fs.ErrInvalid)
	}
	dir := path.Join(ibClassDir, name)
	if _, err := fs.Stat(sysfs, dir); err != nil {
		return d, fmt.Errorf("sysfs: device %s: %w", name, err)
	}
	guid, err := readSysfsString(sysfs, path.Join(dir, "node_guid"))
	if err != nil {
		return d, fmt.Errorf("sysfs: device %s: %w", name, err)
	}
	if d.NodeGUID, err = parseSysfsGUID(guid); err != nil {
		return d, fmt.Errorf("sysfs: device %s: node_guid: %w", name, err)
	}

	ports, err := listSysfsPorts(sysfs, name)
	if err != nil {
		return d, fmt.Errorf("sysfs: device %s: ports: %w", name, err)
	}
	for _, n := range ports {
		d.Ports = append(d.Ports, readSysfsPort(sysfs, sysfsPortDir(name, n), n, gids))
	}

	// A PCI function has a device link, whose last element is its address;
	// virtual devices (rxe, siw) have none and take their netdev from the
	// GID table instead.
	dev := path.Join(dir, "device")
	if target, err := fs.ReadLink(sysfs, dev); err == nil {
		d.PCIAddr = pciAddr(path.Base(target))
	}
	if s, err := readSysfsString(sysfs, path.Join(dev, "numa_node")); err == nil {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			d.NUMANode = n
		}
	}
	if ents, err := fs.ReadDir(sysfs, path.Join(dev, "net")); err == nil && len(ents) > 0 {
		d.Netdev = ents[0].Name() // ReadDir sorts by name
	}
	if d.Netdev == "" {
		d.Netdev = gidNetdev(d.Ports)
	}
	return d, nil
}

// gidNetdev is the first netdev that a GID table names: a virtual device's (rxe,
// siw), which has no PCI function to list one.
func gidNetdev(ports []PortInfo) string {
	for _, p := range ports {
		for _, g := range p.GIDs {
			if g.Netdev != "" {
				return g.Netdev
			}
		}
	}
	return ""
}

// sysfsPortDir is port num's directory of device name.
func sysfsPortDir(name string, num int) string {
	return path.Join(ibClassDir, name, "ports", strconv.Itoa(num))
}

func readSysfsPort(sysfs fs.FS, dir string, num int, gids bool) PortInfo {
	p := PortInfo{Num: num}
	if s, err := readSysfsString(sysfs, path.Join(dir, "state")); err == nil {
		p.State = parseSysfsPortState(s)
	}
	if s, err := readSysfsString(sysfs, path.Join(dir, "link_layer")); err == nil {
		p.LinkLayer = parseSysfsLinkLayer(s)
	}
	if s, err := readSysfsString(sysfs, path.Join(dir, "lid")); err == nil {
		if v, err := strconv.ParseUint(s, 0, 16); err == nil {
			p.LID = uint16(v)
		}
	}
	if gids {
		p.GIDs = readSysfsGIDs(sysfs, dir, p.LinkLayer)
	}
	return p
}

// readSysfsGIDs reads the populated entries of a port's GID table. The
// table has a fixed number of slots, most of them all-zero; the kernel
// answers EINVAL for the attributes of an unused slot, so those are
// skipped before their attributes are read.
func readSysfsGIDs(sysfs fs.FS, portDir string, ll LinkLayer) []GIDEntry {
	ents, err := fs.ReadDir(sysfs, path.Join(portDir, "gids"))
	if err != nil {
		return nil
	}
	var gids []GIDEntry
	for _, e := range ents {
		idx, err := strconv.Atoi(e.Name())
		if err != nil || idx < 0 {
			continue
		}
		s, err := readSysfsString(sysfs, path.Join(portDir, "gids", e.Name()))
		if err != nil {
			continue
		}
		gid, err := parseSysfsGID(s)
		if err != nil || gid.IsZero() {
			continue
		}
		g := GIDEntry{Index: idx, GID: gid, Type: GIDTypeIB}
		if ll == LinkLayerEthernet {
			g.Type = GIDTypeRoCEv1
		}
		if t, err := readSysfsString(sysfs, path.Join(portDir, "gid_attrs", "types", e.Name())); err == nil {
			g.Type = parseSysfsGIDType(t, ll)
		}
		if nd, err := readSysfsString(sysfs, path.Join(portDir, "gid_attrs", "ndevs", e.Name())); err == nil {
			g.Netdev = nd
		}
		gids = append(gids, g)
	}
	sort.Slice(gids, func(i, j int) bool { return gids[i].Index < gids[j].Index })
	return gids
}

func readSysfsString(sysfs fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(sysfs, name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// parseSysfsGUID parses "0c42:a103:0065:8a2c", which sysfs prints in
// network order, into a host integer.
func parseSysfsGUID(s string) (uint64, error) {
	h := strings.ReplaceAll(s, ":", "")
	if len(h) != 16 {
		return 0, fmt.Errorf("malformed GUID %q", s)
	}
	return strconv.ParseUint(h, 16, 64)
}

// parseSysfsGID parses a GID as sysfs prints it: eight groups of four hex
// digits, the IPv6 text form.
func parseSysfsGID(s string) (GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return GID{}, fmt.Errorf("malformed GID %q", s)
	}
	return GID(a.As16()), nil
}

// parseSysfsPortState parses "4: ACTIVE".
func parseSysfsPortState(s string) PortState {
	num, _, _ := strings.Cut(s, ":")
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil || n < 0 || n > int(PortActiveDefer) {
		return PortNop
	}
	return PortState(n)
}

func parseSysfsLinkLayer(s string) LinkLayer {
	switch s {
	case "InfiniBand":
		return LinkLayerInfiniBand
	case "Ethernet":
		return LinkLayerEthernet
	}
	return LinkLayerUnspecified
}

// parseSysfsGIDType parses gid_attrs/types: "IB/RoCE v1" is an IB GID on
// an InfiniBand port and a RoCE v1 GID on an Ethernet one.
func parseSysfsGIDType(s string, ll LinkLayer) GIDType {
	switch {
	case strings.EqualFold(s, "RoCE v2"):
		return GIDTypeRoCEv2
	case ll == LinkLayerEthernet:
		return GIDTypeRoCEv1
	}
	return GIDTypeIB
}

var pciAddrRE = regexp.MustCompile(`^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// pciAddr returns s if it looks like a PCI address (dddd:bb:dd.f), else "".
func pciAddr(s string) string {
	if pciAddrRE.MatchString(s) {
		return s
	}
	return ""
}
