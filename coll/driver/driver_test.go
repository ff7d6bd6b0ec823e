package driver

import (
	"testing"

	"github.com/stretchr/testify/require"
)

type named string

func (n named) Name() string                 { return string(n) }
func (n named) Open(Config) (Context, error) { return nil, nil }

func TestRegistry(t *testing.T) {
	Register(named("registry-b"))
	Register(named("registry-a"))
	require.Panics(t, func() { Register(named("registry-a")) }, "a name taken twice is a programming error")
	require.Panics(t, func() { Register(nil) })
	require.Subset(t, Names(), []string{"registry-a", "registry-b"})

	ts, err := Lookup("Config.TLs", []string{"registry-b", "registry-a"})
	require.NoError(t, err)
	require.Equal(t, "registry-b", ts[0].Name(), "in the order asked")
	require.Equal(t, "registry-a", ts[1].Name())

	_, err = Lookup("Config.TLs", []string{"registry-a", "nope"})
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, `Config.TLs[1] "nope" is not registered`)

	all, err := Lookup("x", nil)
	require.NoError(t, err)
	require.Len(t, all, len(Names()), "no names: every registered transport")
}
