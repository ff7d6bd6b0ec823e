package verbs_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/verbs"
)

// TestContractPath: Options.TrafficClass, ServiceLevel and PKeyIndex reach the QPs a
// context makes, as ibv_query_qp(3) reads them back after Connect (QP.Path): the
// service level on InfiniBand (a RoCE device may drop it: rxe's address vector has
// none), the traffic class where a GRH carries it (RoCE),
// the partition key index (0); and data still moves between the two ends. Values out
// of range, and a partition key index past the port's table, are refused at open naming
// the option.
func TestContractPath(t *testing.T) {
	forEachProvider(t, func(t *testing.T, p provider) {
		ctx := p.open(t)
		attr, err := ctx.Query()
		require.NoError(t, err)
		require.NotEmpty(t, attr.Ports)
		port := attr.Ports[0]
		for _, ap := range attr.Ports {
			if ap.State == verbs.PortActive {
				port = ap
				break
			}
		}
		require.Positive(t, port.PKeyTblLen, "a port has at least its default partition key")
		for _, bad := range []struct {
			o    verbs.Options
			name string
		}{
			{verbs.Options{TrafficClass: 256}, "TrafficClass"},
			{verbs.Options{TrafficClass: -1}, "TrafficClass"},
			{verbs.Options{ServiceLevel: 16}, "ServiceLevel"},
			{verbs.Options{PKeyIndex: -1}, "PKeyIndex"},
			{verbs.Options{PKeyIndex: port.PKeyTblLen}, "PKeyIndex"},
		} {
			o := p.opts
			o.TrafficClass, o.ServiceLevel, o.PKeyIndex = bad.o.TrafficClass, bad.o.ServiceLevel, bad.o.PKeyIndex
			c, err := verbs.OpenWith(p.devA, o)
			require.ErrorIs(t, err, verbs.ErrInvalid, "%+v", bad.o)
			require.ErrorContains(t, err, "Options."+bad.name)
			require.Nil(t, c)
		}

		// Index 0 is the one partition key every port has in use (rxe's table has 64
		// entries, all but the first empty); others are checked at open only.
		q := p
		q.opts.TrafficClass, q.opts.ServiceLevel, q.opts.PKeyIndex = 104, 3, 0
		a, b := connected(t, q)
		for _, e := range []*end{a, b} {
			path, err := e.qp.Path()
			require.NoError(t, err)
			require.Equal(t, q.opts.PKeyIndex, path.PKeyIndex)
			if port.LinkLayer == verbs.LinkLayerEthernet {
				require.Equal(t, 104, path.TrafficClass, "RoCE: the GRH carries the traffic class")
				// A RoCE device may keep the service level as the VLAN priority
				// (mlx5) or drop it (rxe, whose address vector has none).
				require.Contains(t, []int{0, 3}, path.ServiceLevel)
			} else {
				require.Equal(t, 3, path.ServiceLevel, "InfiniBand: the service level")
				require.Zero(t, path.TrafficClass, "no GRH, no traffic class")
			}
			require.Positive(t, path.MTU)
		}
		moveRandom(t, a, b)

		fresh := newEndWith(t, p.devA, p.opts)
		path, err := fresh.qp.Path()
		require.NoError(t, err)
		require.Zero(t, path, "before Connect")
	})
}
