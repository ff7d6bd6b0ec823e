package tlmlx5

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/verbs"
)

// TestPathOptionsReachQPs: driver.Config's service level (and partition key index)
// reach the QPs that a team's links make, as verbs reads them back (QP.Path); the
// traffic class travels too, and soft0's own port, which has no GRH, reports none.
func TestPathOptionsReachQPs(t *testing.T) {
	dc, err := transport{}.Open(driver.Config{Device: verbs.SoftDeviceName, ServiceLevel: 3, TrafficClass: 104})
	require.NoError(t, err)
	defer func() { require.NoError(t, dc.Close()) }()
	const n = 2
	next := make([]uint64, n)
	eps := make([]driver.Endpoint, n)
	addrs := make([][]byte, n)
	for r := range n {
		eps[r], addrs[r], err = dc.NewEndpoint(driver.TeamParams{Rank: r, Size: n, NextSeq: func() uint64 { return next[r] }})
		require.NoError(t, err)
	}
	for r := range n {
		require.NoError(t, eps[r].Connect(addrs), "rank %d", r) // no Messenger: the mesh connects here
	}
	links := 0
	for r, ep := range eps {
		for _, pe := range ep.(*team).linked {
			p, err := pe.qp.Path()
			require.NoError(t, err)
			require.Equal(t, 3, p.ServiceLevel, "rank %d's QP to rank %d", r, pe.rank)
			require.Zero(t, p.PKeyIndex)
			require.Zero(t, p.TrafficClass, "soft0's own port has no GRH")
			links++
		}
		require.NoError(t, ep.Close())
	}
	require.Equal(t, n*(n-1), links)
}
