package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Placement is what one local rank uses.
type Placement struct {
	LocalRank int `json:"local_rank"`
	// GPU is the NVML index of the rank's GPU, -1 for none; CUDAOrdinal is its
	// ordinal among the GPUs CUDA_VISIBLE_DEVICES leaves to the process (what
	// mem.UseCUDADevice takes), -1 for none.
	GPU         int    `json:"gpu"`
	GPUPCI      string `json:"gpu_pci,omitempty"`
	CUDAOrdinal int    `json:"cuda_ordinal"`
	// HCA and Port are the rank's device and port; "" when the node has none.
	HCA    string `json:"hca"`
	HCAPCI string `json:"hca_pci,omitempty"`
	Port   int    `json:"port,omitempty"`
	// Relation is between GPU and HCA; Unknown when placed by NUMA node.
	Relation Relation `json:"relation"`
	// Basis says how the HCA was chosen: "pcie" (nearest to the rank's GPU),
	// "numa" (no GPU: by the NUMA node of the process's CPUs, ranks spread over
	// the HCAs there) or "none" (no HCA).
	Basis string `json:"basis"`
	Note  string `json:"note,omitempty"`
}

// Place picks the GPU, HCA and port of local rank localRank (the rank among the
// processes of this node). cudaVisible is $CUDA_VISIBLE_DEVICES ("" for every
// GPU): the rank takes visible GPU localRank mod k, and ranks that share a GPU
// take its nearest HCAs in turn. CUDA ordinals are taken to follow NVML's
// order (PCI bus order), as with CUDA_DEVICE_ORDER=PCI_BUS_ID.
func (t *Topology) Place(localRank int, cudaVisible string) (Placement, error) {
	if t == nil {
		return Placement{}, fmt.Errorf("topology: Place: nil Topology")
	}
	if localRank < 0 {
		return Placement{}, fmt.Errorf("topology: Place: localRank is negative (%d)", localRank)
	}
	p := Placement{LocalRank: localRank, GPU: -1, CUDAOrdinal: -1, Relation: Unknown, Basis: "none"}
	visible, note := t.visibleGPUs(cudaVisible)
	if len(visible) == 0 {
		if len(t.GPUs) > 0 && note == "" {
			note = "CUDA_VISIBLE_DEVICES leaves no GPU"
		}
		t.placeByNUMA(&p, note)
		return p, nil
	}
	k := len(visible)
	g := t.GPUs[visible[localRank%k]]
	p.GPU, p.GPUPCI, p.CUDAOrdinal = g.Index, g.PCI, localRank%k
	p.Note = note
	if g.HCA == "" {
		p.Note = join(p.Note, fmt.Sprintf("GPU %d: no HCA that sysfs places", g.Index))
		return p, nil
	}
	name := g.HCA
	// The turn is reduced before it is added, so that no local rank overflows the
	// index; a GPU without its nearest list (a Topology built or decoded by hand)
	// keeps its HCA.
	if turn := localRank / k; turn > 0 && len(g.Nearest) > 0 {
		i := max(slices.Index(g.Nearest, g.HCA), 0)
		name = g.Nearest[(i+turn%len(g.Nearest))%len(g.Nearest)]
	}
	h, ok := t.HCA(name)
	if !ok {
		return p, fmt.Errorf("topology: Place: GPU %d's HCA %q is not among the topology's HCAs", g.Index, name)
	}
	p.HCA, p.HCAPCI, p.Port, p.Relation, p.Basis = h.Name, h.PCI, h.ActivePort(), g.Relation, "pcie"
	return p, nil
}

// placeByNUMA gives a rank without a GPU an HCA on the NUMA nodes of the
// process's CPUs (all HCAs if none is there), ranks taking them in turn.
func (t *Topology) placeByNUMA(p *Placement, note string) {
	p.Note = join(t.Note, note)
	cands := t.candidates(false)
	if len(cands) == 0 {
		return
	}
	nodes := map[int]bool{}
	for n, cpus := range t.NUMACPUs {
		for _, c := range cpus {
			if slices.Contains(t.CPUs, c) {
				nodes[n] = true
				break
			}
		}
	}
	var local []int
	for _, j := range cands {
		if nodes[t.HCAs[j].NUMA] {
			local = append(local, j)
		}
	}
	if len(local) > 0 && len(nodes) < len(t.NUMACPUs) {
		cands = local
	}
	slices.SortStableFunc(cands, func(a, b int) int { return t.HCAs[a].NUMA - t.HCAs[b].NUMA })
	h := t.HCAs[cands[p.LocalRank%len(cands)]]
	p.HCA, p.HCAPCI, p.Port, p.Basis = h.Name, h.PCI, h.ActivePort(), "numa"
}

// VisibleGPUs lists the GPUs (indices into GPUs) that a process with
// CUDA_VISIBLE_DEVICES=cudaVisible sees, in CUDA's order: every GPU where it is empty.
func (t *Topology) VisibleGPUs(cudaVisible string) []int {
	if t == nil {
		return nil
	}
	v, _ := t.visibleGPUs(cudaVisible)
	return v
}

// visibleGPUs reads CUDA_VISIBLE_DEVICES as CUDA does: indices or GPU UUIDs
// (or unique UUID prefixes), up to the first entry that names no GPU.
func (t *Topology) visibleGPUs(s string) ([]int, string) {
	all := make([]int, len(t.GPUs))
	for i := range all {
		all[i] = i
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return all, ""
	}
	var out []int
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		i := -1
		if n, err := strconv.Atoi(e); err == nil {
			i = slices.IndexFunc(t.GPUs, func(g GPU) bool { return g.Index == n })
		} else if strings.HasPrefix(e, "GPU-") {
			for j, g := range t.GPUs {
				if strings.HasPrefix(g.UUID, e) {
					if i >= 0 {
						i = -2 // ambiguous
						break
					}
					i = j
				}
			}
		}
		if i >= 0 && slices.Contains(out, i) {
			return out, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q: entry %q repeats a GPU listed before it (CUDA ignores it and what follows)", s, e)
		}
		if i < 0 {
			return out, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q: entry %q names no GPU of this node (CUDA ignores it and what follows)", s, e)
		}
		out = append(out, i)
	}
	return out, ""
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
