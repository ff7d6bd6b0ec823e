package coll_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

func TestConfigFromEnv(t *testing.T) {
	env := map[string]string{
		coll.DeviceEnv:                       "rxe0",
		coll.GIDIndexEnv:                     "3",
		coll.CUDADeviceEnv:                   "1",
		coll.AlgEnvPrefix + "GATHER":         "knomial:4",
		coll.AlgEnvPrefix + "REDUCE_SCATTER": "rh",
		coll.AllOrNothingEnv:                 "1",
		"OMPI_COMM_WORLD_LOCAL_SIZE":         "4",
	}
	getenv := func(k string) string { return env[k] }
	cfg, err := coll.ConfigFromEnv(coll.Config{Algs: map[coll.CollType]string{coll.Bcast: "chain", coll.Gather: "linear"}}, getenv)
	require.NoError(t, err)
	require.Equal(t, "rxe0", cfg.Device)
	require.Equal(t, 3, cfg.GIDIndex)
	require.Equal(t, 1, cfg.CUDADevice)
	require.True(t, cfg.AllOrNothing)
	require.Equal(t, 4, cfg.LocalSize, "the launcher's local size")
	require.Equal(t, map[coll.CollType]string{coll.Bcast: "chain", coll.Gather: "knomial:4", coll.ReduceScatter: "rh"}, cfg.Algs,
		"the environment picks over Config.Algs, which keeps the rest")

	cfg, err = coll.ConfigFromEnv(coll.Config{Device: "mlx5_1", GIDIndex: 2}, getenv)
	require.NoError(t, err)
	require.Equal(t, "mlx5_1", cfg.Device, "an explicit device wins")
	require.Equal(t, 2, cfg.GIDIndex)
	cfg, err = coll.ConfigFromEnv(coll.Config{LocalSize: 1}, getenv)
	require.NoError(t, err)
	require.Equal(t, 1, cfg.LocalSize, "an explicit local size wins")
	cfg, err = coll.ConfigFromEnv(coll.Config{}, func(string) string { return "" })
	require.NoError(t, err)
	require.False(t, cfg.AllOrNothing, "the default mode without the variable")

	for name, bad := range map[string]string{coll.GIDIndexEnv: "x", coll.CUDADeviceEnv: "-1", coll.AllOrNothingEnv: "maybe",
		"LOCAL_WORLD_SIZE": "0"} {
		_, err := coll.ConfigFromEnv(coll.Config{}, func(k string) string {
			if k == name {
				return bad
			}
			return ""
		})
		require.ErrorIs(t, err, coll.ErrInvalid)
		require.ErrorContains(t, err, name)
	}
	_, err = coll.ConfigFromEnv(coll.Config{}, nil)
	require.ErrorIs(t, err, coll.ErrInvalid)

	_, err = coll.NewContext(coll.Config{Device: "soft0", LocalSize: -1})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.ErrorContains(t, err, "Config.LocalSize")
}
