package topology

import "fmt"

// Relation is how far apart two PCI devices are, in nvidia-smi's terms. Smaller
// is nearer.
type Relation int

// The relations, nearest first. Unknown is a device sysfs does not place (a
// virtual HCA such as rxe, or a GPU whose PCI node is missing).
const (
	PIX Relation = iota
	PXB
	PHB
	NODE
	SYS
	Unknown
)

var relationNames = [...]string{"PIX", "PXB", "PHB", "NODE", "SYS", "?"}

func (r Relation) String() string {
	if r < 0 || int(r) >= len(relationNames) {
		return fmt.Sprintf("Relation(%d)", int(r))
	}
	return relationNames[r]
}

// MarshalText writes the name, so that JSON shows "PIX" rather than 0.
func (r Relation) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a name that String writes.
func (r *Relation) UnmarshalText(b []byte) error {
	for i, n := range relationNames {
		if n == string(b) {
			*r = Relation(i)
			return nil
		}
	}
	return fmt.Errorf("topology: unknown relation %q", b)
}

// pciNode is one PCI function's place in the tree.
type pciNode struct {
	Addr       string   // dddd:bb:dd.f
	HostBridge string   // the root complex, "pci0000:00"
	Bridges    []string // PCI bridges from the root port down, not including Addr
	NUMA       int      // -1 when sysfs does not say
}

// relate classifies the path between a and b. Bridges are counted on the path
// through the deepest common one: a PCIe switch shows in sysfs as an upstream
// port and a downstream port per device, so two devices on one switch are three
// bridges apart, and anything more crosses several switches.
func relate(a, b *pciNode) Relation {
	if a == nil || b == nil {
		return Unknown
	}
	if a.HostBridge != b.HostBridge {
		if a.NUMA == b.NUMA {
			return NODE
		}
		return SYS
	}
	k := 0
	for k < len(a.Bridges) && k < len(b.Bridges) && a.Bridges[k] == b.Bridges[k] {
		k++
	}
	if k == 0 {
		return PHB
	}
	if len(a.Bridges)-k+len(b.Bridges)-k+1 <= 3 {
		return PIX
	}
	return PXB
}
