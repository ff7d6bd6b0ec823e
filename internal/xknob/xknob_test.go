package xknob

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKnobs(t *testing.T) {
	code := -1
	exit = func(c int) { code = c }
	t.Cleanup(func() { exit = nil })

	t.Setenv("IBCOLL_X_T", "")
	_, ok := Int("IBCOLL_X_T", 0)
	require.False(t, ok)
	require.Equal(t, -1, code, "unset is no error")

	t.Setenv("IBCOLL_X_T", " 42 ")
	v, ok := Int("IBCOLL_X_T", 1)
	require.True(t, ok)
	require.Equal(t, 42, v)

	for _, bad := range []string{"10us", "4M", "-1", "abc"} {
		code = -1
		t.Setenv("IBCOLL_X_T", bad)
		_, ok = Int("IBCOLL_X_T", 0)
		require.False(t, ok, bad)
		require.Equal(t, 2, code, "%s ends the run", bad)
	}

	t.Setenv("IBCOLL_X_B", "1")
	require.True(t, Bool("IBCOLL_X_B"))
	code = -1
	t.Setenv("IBCOLL_X_B", "true-ish")
	require.False(t, Bool("IBCOLL_X_B"))
	require.Equal(t, 2, code)
}
