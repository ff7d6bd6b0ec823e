package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChooseGIDIndex(t *testing.T) {
	v1 := func(i int, s string) GIDEntry { return GIDEntry{Index: i, GID: gid(t, s), Type: GIDTypeRoCEv1} }
	v2 := func(i int, s string) GIDEntry { return GIDEntry{Index: i, GID: gid(t, s), Type: GIDTypeRoCEv2} }
	tests := []struct {
		name     string
		ll       LinkLayer
		gids     []GIDEntry
		override int
		want     int
	}{
		{"infiniband uses the port GID", LinkLayerInfiniBand, []GIDEntry{{Index: 0, GID: gid(t, "fe80::1")}}, 0, 0},
		{"roce v2 ipv4 over v2 link-local", LinkLayerEthernet, []GIDEntry{v1(0, "fe80::1"), v2(1, "fe80::1"), v1(2, "::ffff:10.0.0.1"), v2(3, "::ffff:10.0.0.1")}, 0, 3},
		{"roce v2 ipv4 over v2 ipv6", LinkLayerEthernet, []GIDEntry{v2(0, "2001:db8::1"), v2(4, "::ffff:10.0.0.1")}, 0, 4},
		{"any roce v2 when no ipv4", LinkLayerEthernet, []GIDEntry{v1(0, "fe80::1"), v2(1, "fe80::1")}, 0, 1},
		{"ipv4 on v1 only", LinkLayerEthernet, []GIDEntry{v1(0, "fe80::1"), v1(1, "::ffff:10.0.0.1")}, 0, 0},
		{"nothing known", LinkLayerEthernet, nil, 0, 0},
		{"override", LinkLayerEthernet, []GIDEntry{v2(3, "::ffff:10.0.0.1")}, 2, 2},
		{"override on infiniband", LinkLayerInfiniBand, nil, 1, 1},
		{"negative is automatic", LinkLayerEthernet, []GIDEntry{v2(3, "::ffff:10.0.0.1")}, -1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, chooseGIDIndex(tt.ll, tt.gids, tt.override))
		})
	}
}
