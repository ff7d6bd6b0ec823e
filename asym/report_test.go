package asym

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

// TestSideReportString: what ibcoll-perf prints of a staged side says how the copies
// went: a single copy of several blocks is one copy, not none.
func TestSideReportString(t *testing.T) {
	out := SideReport{Staged: true, User: mem.Sim, Scratch: mem.Host, Bytes: 4096, CopyOut: true}
	for _, c := range []struct {
		landed bool
		rows   int64
		want   string
	}{
		{false, 0, "sim via host scratch (4096 B, copy-out at completion)"},
		{true, 0, "sim via host scratch (4096 B, copy-out as blocks land)"},
		{true, 1, "sim via host scratch (4096 B, copy-out as blocks land, 1 copy of several blocks at once)"},
		{true, 3, "sim via host scratch (4096 B, copy-out as blocks land, 3 copies of several blocks at once)"},
	} {
		r := out
		r.Landed, r.RowCopies = c.landed, c.rows
		require.Equal(t, c.want, r.String(), "%+v", c)
	}
	require.Equal(t, "cuda direct", SideReport{User: mem.CUDA}.String())
	require.Equal(t, "unused", SideReport{Unused: true}.String())
}
