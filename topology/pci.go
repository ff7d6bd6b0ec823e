package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The PCIe tree comes from sysfs: bus/pci/devices/<addr> is a link into
// devices/, whose path names the host bridge and every bridge above the
// function. Fake trees in tests are built the same way, with real links.

var pciAddrRE = regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// NormalizePCI turns a PCI address as NVML or a user writes it
// ("00000000:07:00.0", "07:00.0", upper case) into sysfs's form
// ("0000:07:00.0"). It returns "" for something that is no PCI address.
func NormalizePCI(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	parts := strings.Split(s, ":")
	switch len(parts) {
	case 2:
		s = "0000:" + s
	case 3:
		d := strings.TrimLeft(parts[0], "0")
		for len(d) < 4 {
			d = "0" + d
		}
		s = d + ":" + parts[1] + ":" + parts[2]
	default:
		return ""
	}
	if !pciAddrRE.MatchString(s) {
		return ""
	}
	return s
}

// readPCINode places addr in the tree under root (a sysfs root).
func readPCINode(root, addr string) (*pciNode, error) {
	if addr == "" {
		return nil, fmt.Errorf("no PCI address")
	}
	link := filepath.Join(root, "bus", "pci", "devices", addr)
	target, err := filepath.EvalSymlinks(link)
	if err != nil {
		return nil, fmt.Errorf("PCI device %s: %w", addr, err)
	}
	devices, err := filepath.EvalSymlinks(filepath.Join(root, "devices"))
	if err != nil {
		return nil, fmt.Errorf("PCI device %s: %w", addr, err)
	}
	rel, err := filepath.Rel(devices, target)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("PCI device %s: %s is outside %s", addr, target, devices)
	}
	n := &pciNode{Addr: addr, NUMA: readInt(filepath.Join(target, "numa_node"), -1)}
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		switch {
		case n.HostBridge == "" && strings.HasPrefix(c, "pci"):
			n.HostBridge = c
		case pciAddrRE.MatchString(c) && c != addr:
			n.Bridges = append(n.Bridges, c)
		}
	}
	if n.HostBridge == "" {
		return nil, fmt.Errorf("PCI device %s: no host bridge in %s", addr, rel)
	}
	return n, nil
}

// readInt reads a decimal integer file, or returns def.
func readInt(name string, def int) int {
	b, err := os.ReadFile(name)
	if err != nil {
		return def
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return def
	}
	return v
}

func readString(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// numaCPUs reads which CPUs belong to each NUMA node
// (devices/system/node/node<N>/cpulist).
func numaCPUs(root string) map[int][]int {
	out := map[int][]int{}
	ents, _ := os.ReadDir(filepath.Join(root, "devices", "system", "node"))
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), "node")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue
		}
		cpus, err := ParseCPUList(readString(filepath.Join(root, "devices", "system", "node", e.Name(), "cpulist")))
		if err == nil {
			out[n] = cpus
		}
	}
	return out
}

// MaxCPU bounds the CPU numbers ParseCPUList takes: the kernel's own limit
// (CONFIG_NR_CPUS) is at most 8192, so a list beyond it is not one the kernel wrote,
// and expanding it would allocate without bound.
const MaxCPU = 1 << 16

// ParseCPUList parses the kernel's list format ("0-3,8,10-11"), CPU numbers up to
// MaxCPU.
func ParseCPUList(s string) ([]int, error) {
	var out []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("topology: CPU list %q: bad entry %q", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("topology: CPU list %q: bad range %q", s, part)
			}
		}
		if b > MaxCPU {
			return nil, fmt.Errorf("topology: CPU list %q: CPU %d is above MaxCPU (%d)", s, b, MaxCPU)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
