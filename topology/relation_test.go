package topology

import "testing"

func TestRelate(t *testing.T) {
	n := func(hb string, numa int, bridges ...string) *pciNode {
		return &pciNode{HostBridge: hb, NUMA: numa, Bridges: bridges}
	}
	cases := []struct {
		name string
		a, b *pciNode
		want Relation
	}{
		{"one switch", n("pci0000:00", 0, "rp", "up", "d0"), n("pci0000:00", 0, "rp", "up", "d1"), PIX},
		{"same downstream port", n("pci0000:00", 0, "rp", "up", "d0"), n("pci0000:00", 0, "rp", "up", "d0"), PIX},
		{"two switch levels", n("pci0000:00", 0, "rp", "u1", "d0", "u2", "x"), n("pci0000:00", 0, "rp", "u1", "d1", "u3", "y"), PXB},
		{"switch below switch", n("pci0000:00", 0, "rp", "u1", "d0", "u2", "x"), n("pci0000:00", 0, "rp", "u1", "d1"), PXB},
		{"two root ports", n("pci0000:00", 0, "rp1"), n("pci0000:00", 0, "rp2", "up", "d"), PHB},
		{"two root complexes, one node", n("pci0000:00", 1, "rp1"), n("pci0000:40", 1, "rp2"), NODE},
		{"two nodes", n("pci0000:00", 0, "rp1"), n("pci0000:80", 1, "rp2"), SYS},
		{"unplaced", nil, n("pci0000:00", 0), Unknown},
	}
	for _, c := range cases {
		if got := relate(c.a, c.b); got != c.want {
			t.Errorf("%s: relate(a, b) = %v, want %v", c.name, got, c.want)
		}
		if got := relate(c.b, c.a); got != c.want {
			t.Errorf("%s: relate(b, a) = %v, want %v (not symmetric)", c.name, got, c.want)
		}
	}
}

func TestRelationText(t *testing.T) {
	for r := PIX; r <= Unknown; r++ {
		b, err := r.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Relation
		if err := back.UnmarshalText(b); err != nil || back != r {
			t.Errorf("%v: round trip gave %v, %v", r, back, err)
		}
	}
	var r Relation
	if err := r.UnmarshalText([]byte("NV12")); err == nil {
		t.Error("UnmarshalText(NV12): no error")
	}
}

func TestNormalizePCI(t *testing.T) {
	cases := map[string]string{
		"00000000:07:00.0": "0000:07:00.0",
		"0000:BD:00.0":     "0000:bd:00.0",
		"07:00.0":          "0000:07:00.0",
		"0001:07:00.0":     "0001:07:00.0",
		"":                 "",
		"07:00":            "",
		"0000:07:00.9":     "",
		"mlx5_0":           "",
	}
	for in, want := range cases {
		if got := NormalizePCI(in); got != want {
			t.Errorf("NormalizePCI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := ParseCPUList("0-2,8,10-11")
	if err != nil || len(got) != 6 || got[0] != 0 || got[2] != 2 || got[3] != 8 || got[5] != 11 {
		t.Errorf("ParseCPUList: %v, %v", got, err)
	}
	// The last two would allocate without bound, or loop for ever past MaxInt.
	for _, bad := range []string{"a", "3-1", "1-", "-1", "0-4000000000", "9223372036854775806-9223372036854775807"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q): no error", bad)
		}
	}
}

// A nil Topology has no HCA, rather than a panic.
func TestNilTopologyHCA(t *testing.T) {
	var top *Topology
	if _, ok := top.HCA("mlx5_0"); ok {
		t.Error("a nil Topology found an HCA")
	}
}
