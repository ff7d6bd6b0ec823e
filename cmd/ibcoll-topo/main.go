// Command ibcoll-topo shows how this node's GPUs and RDMA NICs sit on the PCIe
// tree: the GPU×HCA matrix in nvidia-smi's terms (PIX, PXB, PHB, NODE, SYS), the HCA
// each GPU uses, and the GPU, HCA and port each local rank gets (what
// coll.NewContext opens when no device is named: the HCA nearest to the rank's GPU,
// else the transport's default device). --mock shows a fake machine
// instead (dgx-a100, 2socket, no-nvml); --json prints the same as JSON.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/ibcoll/ibcoll/topology"
)

// report is what --json prints.
type report struct {
	Machine string               `json:"machine,omitempty"`
	GPUs    []topology.GPU       `json:"gpus"`
	HCAs    []topology.HCA       `json:"hcas"`
	Ranks   []topology.Placement `json:"ranks"`
	// Opens is, per rank, the device coll.NewContext opens: the HCA placed by the
	// rank's GPU, or "default" (the first real device with an active port, else
	// soft0) for a rank without a GPU or without a real HCA near it.
	Opens []string `json:"opens"`
	Note  string   `json:"note,omitempty"`
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// maxRanks bounds --ranks: far more local ranks than any node runs (a wild value
// grew the report by gigabytes before it printed a line).
const maxRanks = 1 << 16

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ibcoll-topo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON: {\"gpus\":[{\"index\",\"pci\",\"hca\",\"hca_pci\",\"relation\",...}],\"hcas\":[...],\"ranks\":[...]}")
	mockName := fs.String("mock", "", "show a mock machine instead of this one: "+strings.Join(mockNames(), ", "))
	ranks := fs.Int("ranks", 0, "local ranks to place (default: one per visible GPU, else one per HCA)")
	visible := fs.String("cuda-visible-devices", "", "CUDA_VISIBLE_DEVICES for the placement (default: $CUDA_VISIBLE_DEVICES; none with --mock)")
	sysfs := fs.String("sysfs", "", "sysfs root to read (default /sys)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: ibcoll-topo [--json] [--mock NAME | --sysfs DIR] [--ranks N] [--cuda-visible-devices LIST]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // asked for: no error
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ibcoll-topo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *ranks < 0 || *ranks > maxRanks {
		fmt.Fprintf(stderr, "ibcoll-topo: --ranks must be from 0 to %d, got %d\n", maxRanks, *ranks)
		return 2
	}
	cvd := *visible
	visibleSet := false
	fs.Visit(func(f *flag.Flag) { visibleSet = visibleSet || f.Name == "cuda-visible-devices" })
	if !visibleSet && *mockName == "" {
		cvd = os.Getenv("CUDA_VISIBLE_DEVICES")
	}

	if *sysfs != "" && !sysfsTree(*sysfs) {
		fmt.Fprintf(stderr, "ibcoll-topo: --sysfs %s: no sysfs tree there (no bus/, class/ or devices/)\n", *sysfs)
		return 2
	}
	opts := topology.Options{Root: *sysfs}
	if *mockName != "" {
		if *sysfs != "" {
			fmt.Fprintln(stderr, "ibcoll-topo: --mock and --sysfs exclude each other")
			return 2
		}
		dir, err := os.MkdirTemp("", "ibcoll-topo-mock-")
		if err != nil {
			fmt.Fprintln(stderr, "ibcoll-topo:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		if opts, err = mockOptions(*mockName, dir); err != nil {
			fmt.Fprintln(stderr, "ibcoll-topo: --mock:", err)
			return 2
		}
	}
	t, err := topology.Discover(opts)
	if err != nil {
		fmt.Fprintln(stderr, "ibcoll-topo:", err)
		return 1
	}
	n := *ranks
	if n == 0 {
		n = max(len(t.GPUs), len(t.HCAs), 1)
		if v := t.VisibleGPUs(cvd); len(v) > 0 {
			n = len(v)
		}
	}
	rep := report{Machine: *mockName, GPUs: t.GPUs, HCAs: t.HCAs, Note: t.Note}
	if rep.GPUs == nil {
		rep.GPUs = []topology.GPU{}
	}
	if rep.HCAs == nil {
		rep.HCAs = []topology.HCA{}
	}
	for r := 0; r < n; r++ {
		p, err := t.Place(r, cvd)
		if err != nil {
			fmt.Fprintln(stderr, "ibcoll-topo:", err)
			return 1
		}
		rep.Ranks = append(rep.Ranks, p)
		opens := "default"
		if p.GPU >= 0 && p.HCA != "" {
			opens = p.HCA
		}
		rep.Opens = append(rep.Opens, opens)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "ibcoll-topo:", err)
			return 1
		}
		return 0
	}
	printText(stdout, rep, cvd)
	return 0
}

// sysfsTree reports whether root looks like a sysfs tree: a wrong --sysfs read as
// an empty machine, with exit status 0.
func sysfsTree(root string) bool {
	for _, d := range []string{"bus", "class", "devices"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

func printText(w io.Writer, rep report, cvd string) {
	if rep.Machine != "" {
		fmt.Fprintf(w, "# mock machine %s\n", rep.Machine)
	}
	fmt.Fprintf(w, "# %d GPUs, %d HCAs\n", len(rep.GPUs), len(rep.HCAs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(rep.GPUs) > 0 && len(rep.HCAs) > 0 {
		fmt.Fprint(tw, "\t")
		for _, h := range rep.HCAs {
			fmt.Fprintf(tw, "%s\t", h.Name)
		}
		fmt.Fprint(tw, "NUMA\tuses\n")
		for _, g := range rep.GPUs {
			fmt.Fprintf(tw, "GPU%d\t", g.Index)
			for _, r := range g.Relations {
				fmt.Fprintf(tw, "%s\t", r)
			}
			use := "-"
			if g.HCA != "" {
				use = fmt.Sprintf("%s (%s)", g.HCA, g.Relation)
			}
			fmt.Fprintf(tw, "%d\t%s\n", g.NUMA, use)
		}
		tw.Flush()
		fmt.Fprintln(w, "# PIX: at most one PCIe switch; PXB: several switches; PHB: through a host bridge;")
		fmt.Fprintln(w, "# NODE: between host bridges of one NUMA node; SYS: across NUMA nodes")
	}
	for _, h := range rep.HCAs {
		var ports []string
		for _, p := range h.Ports {
			ports = append(ports, fmt.Sprintf("%d %s %s", p.Num, p.State, p.LinkLayer))
		}
		pci := h.PCI
		if pci == "" {
			pci = "virtual"
		}
		fmt.Fprintf(tw, "%s\t%s\tNUMA %d\t%s\t%s\n", h.Name, pci, h.NUMA, strings.Join(ports, ", "), strings.Join(h.Netdevs, ","))
	}
	tw.Flush()
	if cvd != "" {
		fmt.Fprintf(w, "# local ranks (CUDA_VISIBLE_DEVICES=%s)\n", cvd)
	} else {
		fmt.Fprintln(w, "# local ranks")
	}
	defaults := false
	for _, p := range rep.Ranks {
		gpu := "no GPU"
		if p.GPU >= 0 {
			gpu = fmt.Sprintf("GPU %d (%s, CUDA ordinal %d)", p.GPU, p.GPUPCI, p.CUDAOrdinal)
		}
		var hca string
		switch {
		case p.GPU >= 0 && p.HCA != "":
			hca = fmt.Sprintf("%s port %d (%s)", p.HCA, p.Port, p.Relation)
		case p.HCA != "":
			// What coll.NewContext opens is the default: it places only ranks
			// with a GPU. The NUMA node's HCA is the topology's suggestion.
			hca = fmt.Sprintf("default device (no GPU to place by; by NUMA node: %s port %d)", p.HCA, p.Port)
			defaults = true
		default:
			hca = "default device (no real HCA to place on)"
			defaults = true
		}
		// A rank's own note (an entry of CUDA_VISIBLE_DEVICES that names no GPU,
		// a GPU without a near HCA) follows the topology's, which is said once below.
		own := strings.TrimPrefix(strings.TrimPrefix(p.Note, rep.Note), "; ")
		if own != "" {
			hca += "\t(" + own + ")"
		}
		fmt.Fprintf(tw, "rank %d\t%s\t-> %s\n", p.LocalRank, gpu, hca)
	}
	tw.Flush()
	if defaults {
		fmt.Fprintln(w, "# default device: what coll.NewContext opens where it places nothing: the first real RDMA device with an active port, else soft0")
	}
	if rep.Note != "" {
		fmt.Fprintln(w, "note:", rep.Note)
	}
}
