package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSoftStreams: which writes soft0 makes with non-temporal stores. Pinned host
// memory takes them at every size; memory registered with HintOwnerReads from
// ownerReadsStreamMin up; other memory never.
func TestSoftStreams(t *testing.T) {
	pinned := &softMR{stream: true}
	hinted := &softMR{ownerReads: true, access: HintOwnerReads}
	plain := &softMR{}
	for _, n := range []uint64{1, 64, ownerReadsStreamMin - 1, ownerReadsStreamMin, 1 << 20} {
		require.True(t, pinned.streams(n), "pinned, %d bytes", n)
		require.Equal(t, n >= ownerReadsStreamMin, hinted.streams(n), "hinted, %d bytes", n)
		require.False(t, plain.streams(n), "plain, %d bytes", n)
	}
	require.Contains(t, hinted.via(), "its owner reads what lands")
	require.Equal(t, "soft0", plain.via())
}

// TestSoftRegHint: registration turns the hint into the streaming choice for host
// memory and reports it in Via; an unknown bit is still refused. (The data path with
// the hint, on every provider: TestContractHintOwnerReads.)
func TestSoftRegHint(t *testing.T) {
	ctx, err := Open(SoftDeviceName)
	require.NoError(t, err)
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	require.NoError(t, err)
	defer pd.Close()
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, AccessLocalWrite|AccessRemoteWrite|HintOwnerReads)
	require.NoError(t, err)
	defer mr.Close()
	require.Equal(t, "soft0, its owner reads what lands: writes with immediate of 32-256 KiB posted alone offered to its poller, other writes from 32 KiB non-temporal", mr.Via())
	plain, err := pd.RegMR(make([]byte, 4096), AccessLocalWrite|AccessRemoteWrite)
	require.NoError(t, err)
	defer plain.Close()
	require.Equal(t, "soft0", plain.Via())
	_, err = pd.RegMR(make([]byte, 64), Access(1<<30))
	require.ErrorContains(t, err, "unknown bits")
}
