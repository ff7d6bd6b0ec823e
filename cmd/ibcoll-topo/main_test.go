//go:build cgo

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// The shape the issue asks for: every GPU with index, pci, hca, hca_pci and a
// relation of PIX or PXB on the DGX A100, GPUs of different switches on
// different HCAs.
func TestMockDGXA100JSON(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--mock", "dgx-a100", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep struct {
		GPUs []struct {
			Index    *int   `json:"index"`
			PCI      string `json:"pci"`
			HCA      string `json:"hca"`
			HCAPCI   string `json:"hca_pci"`
			Relation string `json:"relation"`
		} `json:"gpus"`
		Ranks []struct {
			GPU int    `json:"gpu"`
			HCA string `json:"hca"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(rep.GPUs) != 8 || len(rep.Ranks) != 8 {
		t.Fatalf("%d GPUs, %d ranks, want 8 each", len(rep.GPUs), len(rep.Ranks))
	}
	hcas := map[string]bool{}
	for i, g := range rep.GPUs {
		if g.Index == nil || *g.Index != i || g.PCI == "" || g.HCA == "" || g.HCAPCI == "" {
			t.Errorf("gpus[%d] = %+v: incomplete", i, g)
		}
		if g.Relation != "PIX" && g.Relation != "PXB" {
			t.Errorf("gpus[%d]: relation %q", i, g.Relation)
		}
		hcas[g.HCA] = true
		if r := rep.Ranks[i]; r.GPU != i || r.HCA != g.HCA {
			t.Errorf("ranks[%d] = %+v, want GPU %d on %s", i, r, i, g.HCA)
		}
	}
	if len(hcas) != 8 {
		t.Errorf("GPUs use %d distinct HCAs, want 8", len(hcas))
	}
}

func TestTextAndBadArgs(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--mock", "2socket"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"GPU0  PIX", "mlx5_0 port 1 (PIX)", "mlx5_1 port 1 (NODE)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The text says why a rank has no GPU, as --json does (it did not, until
	// session 40).
	out.Reset()
	if code := run([]string{"--mock", "2socket", "--cuda-visible-devices", "abc"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), `names no GPU`) {
		t.Errorf("the text lacks the rank's note:\n%s", out.String())
	}
	for _, args := range [][]string{{"--mock", "nope"}, {"--ranks", "-1"}, {"--ranks", "99999999999"}, {"extra"}, {"--mock", "2socket", "--sysfs", "/x"}} {
		out.Reset()
		errb.Reset()
		if code := run(args, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, code, errb.String())
		}
	}
}

// TestSaysWhatNewContextOpens: a rank without a GPU opens the transport's default
// device, and the tool says so instead of showing the NUMA node's HCA as its choice
// (it did, and its note said ranks were placed by NUMA node, which coll never does);
// the JSON's opens lists what each rank opens. Session 41's audit also found: a wrong
// --sysfs read as an empty machine with status 0, -h exited 2, the default rank count
// ignored CUDA_VISIBLE_DEVICES, and a repeated entry was said to name no GPU.
func TestSaysWhatNewContextOpens(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--mock", "no-nvml"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"-> default device (no GPU to place by; by NUMA node: mlx5_", "# default device: what coll.NewContext opens"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "placed") {
		t.Errorf("the output says ranks are placed:\n%s", out.String())
	}
	for _, c := range []struct {
		mock  string
		ranks int
		want  func(hca string) string
	}{
		{"no-nvml", 2, func(string) string { return "default" }},
		{"dgx-a100", 8, func(hca string) string { return hca }},
	} {
		out.Reset()
		if code := run([]string{"--mock", c.mock, "--json", "--ranks", fmt.Sprint(c.ranks)}, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		var rep struct {
			Ranks []struct {
				HCA string `json:"hca"`
			} `json:"ranks"`
			Opens []string `json:"opens"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		if len(rep.Opens) != c.ranks || len(rep.Ranks) != c.ranks {
			t.Fatalf("%s: %d opens for %d ranks", c.mock, len(rep.Opens), len(rep.Ranks))
		}
		for i, r := range rep.Ranks {
			if rep.Opens[i] != c.want(r.HCA) || r.HCA == "" {
				t.Errorf("%s rank %d: opens %q, placement %q", c.mock, i, rep.Opens[i], r.HCA)
			}
		}
	}

	errb.Reset()
	if code := run([]string{"--sysfs", t.TempDir()}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "no sysfs tree there") {
		t.Errorf("--sysfs of an empty directory: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"-h"}, &out, &errb); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	out.Reset()
	if code := run([]string{"--mock", "dgx-a100", "--cuda-visible-devices", "1"}, &out, &errb); code != 0 || strings.Count(out.String(), "\nrank ") != 1 {
		t.Errorf("one visible GPU: exit %d, want one rank:\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--mock", "dgx-a100", "--cuda-visible-devices", "3,3", "--ranks", "1"}, &out, &errb); code != 0 || !strings.Contains(out.String(), `entry "3" repeats a GPU listed before it`) {
		t.Errorf("a repeated entry: exit %d:\n%s", code, out.String())
	}
}
