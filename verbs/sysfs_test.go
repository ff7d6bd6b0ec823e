package verbs

import (
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// fakeSysfs builds a sysfs tree under root: files maps paths to contents
// (a trailing "/" makes a directory), links maps link paths to targets.
func fakeSysfs(t *testing.T, root string, files, links map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if p[len(p)-1] == '/' {
			require.NoError(t, os.MkdirAll(full, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content+"\n"), 0o444))
	}
	for p, target := range links {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.Symlink(target, full))
	}
}

const zeroGID = "0000:0000:0000:0000:0000:0000:0000:0000"

// fakeHost lays out three devices the way the kernel does:
//   - mlx5_0, an InfiniBand HCA: PCI function 0000:3b:00.0 on NUMA node 1,
//     LID 0x1a, IPoIB netdev ib0;
//   - mlx5_1, a RoCE NIC: PCI function 0000:af:00.1 with no NUMA affinity,
//     RoCE v1 and v2 GIDs for the link-local and an IPv4 address of ens1f1;
//   - rxe0, soft-RoCE on veth0: a virtual device with no device link.
//
// The unused GID slots hold zeros; their gid_attrs are absent (the kernel
// answers EINVAL for them), and one populated GID of mlx5_1 has an
// unreadable type, which must fall back to the link layer's default.
func fakeHost(t *testing.T) string {
	root := t.TempDir()
	ib := "devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"
	roce := "devices/pci0000:ae/0000:ae:00.0/0000:af:00.1"
	files := map[string]string{
		ib + "/numa_node":                                   "1",
		ib + "/net/ib0/":                                    "",
		ib + "/infiniband/mlx5_0/node_guid":                 "0c42:a103:0065:8a2c",
		ib + "/infiniband/mlx5_0/ports/1/state":             "4: ACTIVE",
		ib + "/infiniband/mlx5_0/ports/1/link_layer":        "InfiniBand",
		ib + "/infiniband/mlx5_0/ports/1/lid":               "0x1a",
		ib + "/infiniband/mlx5_0/ports/1/gids/0":            "fe80:0000:0000:0000:0c42:a103:0065:8a2c",
		ib + "/infiniband/mlx5_0/ports/1/gids/1":            zeroGID,
		ib + "/infiniband/mlx5_0/ports/1/gid_attrs/types/0": "IB/RoCE v1",

		roce + "/numa_node":                                    "-1",
		roce + "/net/ens1f1/":                                  "",
		roce + "/infiniband/mlx5_1/node_guid":                  "b859:9f03:00d4:1e21",
		roce + "/infiniband/mlx5_1/ports/1/state":              "1: DOWN",
		roce + "/infiniband/mlx5_1/ports/1/link_layer":         "Ethernet",
		roce + "/infiniband/mlx5_1/ports/1/lid":                "0x0",
		roce + "/infiniband/mlx5_1/ports/1/gids/0":             "fe80:0000:0000:0000:ba59:9fff:fed4:1e21",
		roce + "/infiniband/mlx5_1/ports/1/gids/1":             "fe80:0000:0000:0000:ba59:9fff:fed4:1e21",
		roce + "/infiniband/mlx5_1/ports/1/gids/2":             "0000:0000:0000:0000:0000:ffff:c0a8:010a",
		roce + "/infiniband/mlx5_1/ports/1/gids/3":             "0000:0000:0000:0000:0000:ffff:c0a8:010a",
		roce + "/infiniband/mlx5_1/ports/1/gids/4":             zeroGID,
		roce + "/infiniband/mlx5_1/ports/1/gids/5":             "fe80:0000:0000:0000:0000:0000:0000:0005",
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/types/0":  "IB/RoCE v1",
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/types/1":  "RoCE v2",
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/types/2":  "IB/RoCE v1",
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/types/3":  "RoCE v2",
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/types/5/": "", // read fails
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/0":  "ens1f1",
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/1":  "ens1f1",
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/2":  "ens1f1",
		roce + "/infiniband/mlx5_1/ports/1/gid_attrs/ndevs/3":  "ens1f1",

		"devices/virtual/infiniband/rxe0/node_guid":                 "e8eb:d3ff:fe9a:0001",
		"devices/virtual/infiniband/rxe0/ports/1/state":             "4: ACTIVE",
		"devices/virtual/infiniband/rxe0/ports/1/link_layer":        "Ethernet",
		"devices/virtual/infiniband/rxe0/ports/1/lid":               "0x0",
		"devices/virtual/infiniband/rxe0/ports/1/gids/0":            "fe80:0000:0000:0000:e8eb:d3ff:fe9a:0001",
		"devices/virtual/infiniband/rxe0/ports/1/gids/1":            "0000:0000:0000:0000:0000:ffff:0a63:0001",
		"devices/virtual/infiniband/rxe0/ports/1/gids/2":            zeroGID,
		"devices/virtual/infiniband/rxe0/ports/1/gid_attrs/types/0": "RoCE v2",
		"devices/virtual/infiniband/rxe0/ports/1/gid_attrs/types/1": "RoCE v2",
		"devices/virtual/infiniband/rxe0/ports/1/gid_attrs/ndevs/0": "veth0",
		"devices/virtual/infiniband/rxe0/ports/1/gid_attrs/ndevs/1": "veth0",
	}
	links := map[string]string{
		"class/infiniband/mlx5_0":          "../../" + ib + "/infiniband/mlx5_0",
		ib + "/infiniband/mlx5_0/device":   "../../../0000:3b:00.0",
		"class/infiniband/mlx5_1":          "../../" + roce + "/infiniband/mlx5_1",
		roce + "/infiniband/mlx5_1/device": "../../../0000:af:00.1",
		"class/infiniband/rxe0":            "../../devices/virtual/infiniband/rxe0",
	}
	fakeSysfs(t, root, files, links)
	return root
}

func gid(t *testing.T, s string) GID {
	t.Helper()
	a, err := netip.ParseAddr(s)
	require.NoError(t, err)
	return GID(a.As16())
}

func TestListSysfsDevices(t *testing.T) {
	names, err := listSysfsDevices(os.DirFS(fakeHost(t)))
	require.NoError(t, err)
	require.Equal(t, []string{"mlx5_0", "mlx5_1", "rxe0"}, names)

	names, err = listSysfsDevices(os.DirFS(t.TempDir()))
	require.NoError(t, err, "a host without an infiniband class has no devices")
	require.Empty(t, names)

	// The production reader, on this machine's /sys: it lists what the
	// kernel lists there (nothing where the kernel lacks RDMA), without
	// error.
	names, err = listSysfsDevices(sysfs)
	require.NoError(t, err)
	var want []string
	if ents, err := os.ReadDir("/sys/class/infiniband"); err == nil {
		for _, e := range ents {
			want = append(want, e.Name())
		}
	}
	require.Equal(t, want, names)
	for _, n := range names {
		d, err := readSysfsDevice(sysfs, n)
		require.NoError(t, err, n)
		t.Logf("%+v", d)
	}
}

func TestReadSysfsDevice(t *testing.T) {
	root := os.DirFS(fakeHost(t))
	tests := []struct {
		name string
		want sysfsDevice
		gid  int // chooseGIDIndex on the first port
	}{
		{
			name: "mlx5_0",
			want: sysfsDevice{
				Name: "mlx5_0", NodeGUID: 0x0c42a10300658a2c, Netdev: "ib0", PCIAddr: "0000:3b:00.0", NUMANode: 1,
				Ports: []PortInfo{{
					Num: 1, State: PortActive, LinkLayer: LinkLayerInfiniBand, LID: 0x1a,
					GIDs: []GIDEntry{{Index: 0, GID: gid(t, "fe80::c42:a103:65:8a2c"), Type: GIDTypeIB}},
				}},
			},
			gid: 0,
		},
		{
			name: "mlx5_1",
			want: sysfsDevice{
				Name: "mlx5_1", NodeGUID: 0xb8599f0300d41e21, Netdev: "ens1f1", PCIAddr: "0000:af:00.1", NUMANode: -1,
				Ports: []PortInfo{{
					Num: 1, State: PortDown, LinkLayer: LinkLayerEthernet,
					GIDs: []GIDEntry{
						{Index: 0, GID: gid(t, "fe80::ba59:9fff:fed4:1e21"), Type: GIDTypeRoCEv1, Netdev: "ens1f1"},
						{Index: 1, GID: gid(t, "fe80::ba59:9fff:fed4:1e21"), Type: GIDTypeRoCEv2, Netdev: "ens1f1"},
						{Index: 2, GID: gid(t, "::ffff:192.168.1.10"), Type: GIDTypeRoCEv1, Netdev: "ens1f1"},
						{Index: 3, GID: gid(t, "::ffff:192.168.1.10"), Type: GIDTypeRoCEv2, Netdev: "ens1f1"},
						{Index: 5, GID: gid(t, "fe80::5"), Type: GIDTypeRoCEv1},
					},
				}},
			},
			gid: 3,
		},
		{
			name: "rxe0",
			want: sysfsDevice{
				Name: "rxe0", NodeGUID: 0xe8ebd3fffe9a0001, Netdev: "veth0", NUMANode: -1,
				Ports: []PortInfo{{
					Num: 1, State: PortActive, LinkLayer: LinkLayerEthernet,
					GIDs: []GIDEntry{
						{Index: 0, GID: gid(t, "fe80::e8eb:d3ff:fe9a:1"), Type: GIDTypeRoCEv2, Netdev: "veth0"},
						{Index: 1, GID: gid(t, "::ffff:10.99.0.1"), Type: GIDTypeRoCEv2, Netdev: "veth0"},
					},
				}},
			},
			gid: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readSysfsDevice(root, tt.name)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			info := got.info()
			require.Equal(t, "ibv", info.Provider)
			require.Equal(t, tt.want.NUMANode, info.NUMANode)
			require.Equal(t, tt.gid, chooseGIDIndex(got.Ports[0].LinkLayer, got.Ports[0].GIDs, 0))
		})
	}

	_, err := readSysfsDevice(root, "mlx5_9")
	require.ErrorIs(t, err, os.ErrNotExist)
	for _, bad := range []string{"", "..", "mlx5_0/ports", "/mlx5_0"} {
		_, err := readSysfsDevice(root, bad)
		require.Error(t, err, "device name %q is not a name in the class directory", bad)
	}
}

// A device whose attributes are all missing but node_guid still reads:
// every optional attribute falls back to "unknown" instead of failing. The
// tree is an fstest.MapFS: the reader needs nothing of an fs.FS but what
// it promises (ReadLink where a device link exists).
func TestReadSysfsDeviceSparse(t *testing.T) {
	link := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink}
	}
	root := fstest.MapFS{
		"class/infiniband/siw0/node_guid":   {Data: []byte("0000:0000:0000:0001\n")},
		"class/infiniband/siw0/ports/1":     {Mode: fs.ModeDir},
		"class/infiniband/siw0/ports/x":     {Mode: fs.ModeDir},
		"class/infiniband/siw0/device":      link("../../../bus/auxiliary/devices/mlx5_core.sf.2"),
		"class/infiniband/mlx5_9/node_guid": {Data: []byte("0000:0000:0000:0009\n")},
		"class/infiniband/mlx5_9/device":    link("../../../0000:5e:00.0"),
		"class/infiniband/bad0/node_guid":   {Data: []byte("zz\n")},
	}
	names, err := listSysfsDevices(root)
	require.NoError(t, err)
	require.Equal(t, []string{"bad0", "mlx5_9", "siw0"}, names)

	got, err := readSysfsDevice(root, "siw0")
	require.NoError(t, err)
	require.Equal(t, sysfsDevice{Name: "siw0", NodeGUID: 1, NUMANode: -1, Ports: []PortInfo{{Num: 1}}}, got)

	got, err = readSysfsDevice(root, "mlx5_9")
	require.NoError(t, err)
	require.Equal(t, "0000:5e:00.0", got.PCIAddr, "the PCI address is the device link's last element")

	_, err = readSysfsDevice(root, "bad0")
	require.Error(t, err)
}

func TestSysfsParsers(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want PortState
	}{
		{"4: ACTIVE", PortActive}, {"1: DOWN", PortDown}, {"2: INIT", PortInit},
		{"3: ARMED", PortArmed}, {"5: ACTIVE_DEFER", PortActiveDefer}, {"9: FUTURE", PortNop}, {"", PortNop},
	} {
		require.Equal(t, tt.want, parseSysfsPortState(tt.in), tt.in)
	}
	for _, tt := range []struct {
		in   string
		want LinkLayer
	}{{"InfiniBand", LinkLayerInfiniBand}, {"Ethernet", LinkLayerEthernet}, {"", LinkLayerUnspecified}} {
		require.Equal(t, tt.want, parseSysfsLinkLayer(tt.in), tt.in)
	}
	for _, tt := range []struct {
		in   string
		ll   LinkLayer
		want GIDType
	}{
		{"IB/RoCE v1", LinkLayerInfiniBand, GIDTypeIB},
		{"IB/RoCE v1", LinkLayerEthernet, GIDTypeRoCEv1},
		{"RoCE v2", LinkLayerEthernet, GIDTypeRoCEv2},
	} {
		require.Equal(t, tt.want, parseSysfsGIDType(tt.in, tt.ll), tt.in)
	}
	for _, tt := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0c42:a103:0065:8a2c", 0x0c42a10300658a2c, true},
		{"0000:0000:0000:0000", 0, true},
		{"0c42:a103:0065", 0, false},
		{"0c42:a103:0065:8a2g", 0, false},
	} {
		got, err := parseSysfsGUID(tt.in)
		require.Equal(t, tt.ok, err == nil, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
	for _, tt := range []struct{ in, want string }{
		{"0000:3b:00.0", "0000:3b:00.0"},
		{"10000:e1:00.7", "10000:e1:00.7"}, // VMD domains are wider
		{"mlx5_core.sf.2", ""},
		{"rxe0", ""},
		{"0000:3b:00.8", ""},
	} {
		require.Equal(t, tt.want, pciAddr(tt.in), tt.in)
	}
	_, err := parseSysfsGID("10.0.0.1")
	require.Error(t, err, "an IPv4 text form is not how sysfs prints a GID")
}
