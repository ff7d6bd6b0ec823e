package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// GPUInfo is what a GPUSource says of one GPU.
type GPUInfo struct {
	Index int    // NVML's index (PCI bus order)
	PCI   string // bus id, any case and domain width
	UUID  string
	Name  string
}

// GPUSource lists the node's GPUs. NVML (cgo builds) adapts go-nvml; NoGPUs
// is a source that has none, with the reason.
type GPUSource interface {
	GPUs() ([]GPUInfo, error)
}

// NoGPUs is a GPUSource without GPUs; its string is the reason, which
// Discover puts in Topology.Note.
type NoGPUs string

// GPUs returns an error carrying the reason.
func (n NoGPUs) GPUs() ([]GPUInfo, error) { return nil, errors.New(string(n)) }

// Options say where Discover looks.
type Options struct {
	// Root is the sysfs root; "" means /sys.
	Root string
	// GPUs lists the GPUs; nil means the driver's NVML (through go-nvml's
	// dlopen of libnvidia-ml.so.1; absent without cgo).
	GPUs GPUSource
	// CPUs are the CPUs this process may run on, for placing ranks by NUMA node
	// when there are no GPUs; nil means the process's affinity.
	CPUs []int
}

// Topology is one node's GPUs and HCAs and how they relate.
type Topology struct {
	GPUs []GPU `json:"gpus"`
	HCAs []HCA `json:"hcas"`
	// Note says what Discover could not see and what it did instead (no NVML:
	// ranks are placed by NUMA node); "" when nothing is missing.
	Note string `json:"note,omitempty"`
	// CPUs is the process's CPU affinity, NUMACPUs the CPUs of each NUMA node.
	CPUs     []int         `json:"-"`
	NUMACPUs map[int][]int `json:"-"`
}

// GPU is one GPU, its relation to every HCA and the HCA chosen for it.
type GPU struct {
	Index int    `json:"index"`
	PCI   string `json:"pci"`
	UUID  string `json:"uuid,omitempty"`
	Name  string `json:"name,omitempty"`
	NUMA  int    `json:"numa"`
	// HCA is the HCA this GPU uses: one of Nearest, spread over the GPUs that
	// share them. "" when the node has no HCA that sysfs places.
	HCA      string   `json:"hca"`
	HCAPCI   string   `json:"hca_pci"`
	Relation Relation `json:"relation"`
	// Nearest lists every HCA at Relation, in name order.
	Nearest []string `json:"nearest,omitempty"`
	// Relations gives the relation to each HCA, in the order of Topology.HCAs.
	Relations []Relation `json:"relations"`

	node *pciNode
}

// Discover reads the node's topology. It fails only on bad options; what it
// cannot read (no NVML, a GPU sysfs does not place, no RDMA device) leaves
// those parts empty and is said in Note.
func Discover(o Options) (*Topology, error) {
	if o.Root == "" {
		o.Root = "/sys"
	}
	if o.GPUs == nil {
		o.GPUs = defaultGPUs()
	}
	t := &Topology{HCAs: readHCAs(o.Root), NUMACPUs: numaCPUs(o.Root), CPUs: o.CPUs}
	if t.CPUs == nil {
		t.CPUs = processCPUs()
	}
	var notes []string
	for i := range t.HCAs {
		h := &t.HCAs[i]
		if h.PCI == "" {
			continue
		}
		n, err := readPCINode(o.Root, h.PCI)
		if err != nil {
			notes = append(notes, fmt.Sprintf("HCA %s: %v", h.Name, err))
			continue
		}
		h.node = n
	}
	infos, err := o.GPUs.GPUs()
	if err != nil {
		notes = append(notes, fmt.Sprintf("no GPUs from NVML (%v)", err))
	}
	slices.SortFunc(infos, func(a, b GPUInfo) int { return a.Index - b.Index })
	for _, info := range infos {
		g := GPU{Index: info.Index, PCI: NormalizePCI(info.PCI), UUID: info.UUID, Name: info.Name, NUMA: -1, Relation: Unknown}
		if g.PCI == "" {
			notes = append(notes, fmt.Sprintf("GPU %d: PCI bus id %q is malformed", info.Index, info.PCI))
		} else if n, err := readPCINode(o.Root, g.PCI); err != nil {
			notes = append(notes, fmt.Sprintf("GPU %d: %v", info.Index, err))
		} else {
			g.node, g.NUMA = n, n.NUMA
		}
		g.Relations = make([]Relation, len(t.HCAs))
		for j := range t.HCAs {
			g.Relations[j] = relate(g.node, t.HCAs[j].node)
		}
		t.GPUs = append(t.GPUs, g)
	}
	if len(t.HCAs) == 0 {
		notes = append(notes, "no RDMA device in sysfs")
	}
	t.Note = strings.Join(notes, "; ")
	t.assign()
	return t, nil
}

// candidates are the HCAs that GPUs and ranks may be given: those sysfs places
// (placed=true) or all, and of those the ones with an active port if any has one.
func (t *Topology) candidates(placed bool) []int {
	var all, active []int
	for i, h := range t.HCAs {
		if placed && h.node == nil {
			continue
		}
		all = append(all, i)
		if h.Active() {
			active = append(active, i)
		}
	}
	if len(active) > 0 {
		return active
	}
	return all
}

// assign gives every GPU its nearest HCAs and, among them, the one used by
// the fewest GPUs before it (in index order): GPUs behind one switch with two
// NICs take one each, so ranks spread across rails.
func (t *Topology) assign() {
	cands := t.candidates(true)
	used := make([]int, len(t.HCAs))
	for gi := range t.GPUs {
		g := &t.GPUs[gi]
		best := Unknown
		for _, j := range cands {
			best = min(best, g.Relations[j])
		}
		if best == Unknown {
			continue
		}
		pick := -1
		for _, j := range cands {
			if g.Relations[j] != best {
				continue
			}
			g.Nearest = append(g.Nearest, t.HCAs[j].Name)
			if pick < 0 || used[j] < used[pick] {
				pick = j
			}
		}
		used[pick]++
		g.HCA, g.HCAPCI, g.Relation = t.HCAs[pick].Name, t.HCAs[pick].PCI, best
	}
}

// HCA returns the HCA named name.
func (t *Topology) HCA(name string) (HCA, bool) {
	if t == nil {
		return HCA{}, false
	}
	for _, h := range t.HCAs {
		if h.Name == name {
			return h, true
		}
	}
	return HCA{}, false
}
