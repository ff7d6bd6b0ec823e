package mem_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/mem"
)

func TestTypeNames(t *testing.T) {
	for _, tc := range []struct {
		t    mem.Type
		name string
	}{
		{mem.Host, "host"},
		{mem.CUDA, "cuda"},
		{mem.CUDAManaged, "cuda-managed"},
		{mem.DM, "dm"},
		{mem.Sim, "sim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.name, tc.t.String())
			got, err := mem.ParseType(tc.name)
			require.NoError(t, err)
			require.Equal(t, tc.t, got)
		})
	}
	require.Equal(t, "Type(42)", mem.Type(42).String())
}

func TestParseTypeBad(t *testing.T) {
	for _, s := range []string{"", "Host", "gpu", "managed", "cuda_managed", " host", "Type(1)"} {
		t.Run(s, func(t *testing.T) {
			_, err := mem.ParseType(s)
			require.ErrorIs(t, err, mem.ErrInvalid)
			require.ErrorContains(t, err, `"`+s+`"`)
			require.ErrorContains(t, err, "host, cuda, cuda-managed, dm, sim")
		})
	}
}
