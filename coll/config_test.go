package coll_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/bootstrap"
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
	// Spaces around a value are no error, as around the launchers' (bootstrap).
	env[coll.GIDIndexEnv], env[coll.AllOrNothingEnv] = " 3", "1 "
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

	for _, kv := range [][2]string{{coll.GIDIndexEnv, "x"}, {coll.CUDADeviceEnv, "-1"}, {coll.AllOrNothingEnv, "maybe"},
		{"LOCAL_WORLD_SIZE", "0"},
		// The address handle keeps a GID index in 8 bits, the driver a device
		// ordinal in an int (4294967296 wrapped to device 0).
		{coll.GIDIndexEnv, "256"}, {coll.CUDADeviceEnv, "4294967296"}} {
		name, bad := kv[0], kv[1]
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
	_, err = coll.NewContext(coll.Config{Device: "soft0", GIDIndex: 256})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.ErrorContains(t, err, "Config.GIDIndex")
	_, err = coll.NewContext(coll.Config{Device: "soft0", CUDADevice: 1 << 32})
	require.ErrorIs(t, err, coll.ErrInvalid)
	require.ErrorContains(t, err, "Config.CUDADevice")
}

// TestConfigFromEnvFollowsLauncher: the local rank and size come from the launcher
// that bootstrap.Detect picks. torchrun inside a Slurm allocation passes Slurm's
// variables on to its workers; reading SLURM_LOCALID and SLURM_NTASKS_PER_NODE first
// (before session 40) gave every worker of a node local rank 0 and size 1, so each
// took GPU 0's HCA and thought it had the node to itself.
func TestConfigFromEnvFollowsLauncher(t *testing.T) {
	env := map[string]string{"RANK": "11", "WORLD_SIZE": "16", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "n0",
		"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1", "SLURM_LAUNCH_NODE_IPADDR": "n0"}
	getenv := func(k string) string { return env[k] }
	be, ok, err := bootstrap.Detect(getenv)
	require.NoError(t, err)
	require.True(t, ok)
	cfg, err := coll.ConfigFromEnv(coll.Config{}, getenv)
	require.NoError(t, err)
	require.Equal(t, bootstrap.SourceTorchrun, be.Source)
	require.Equal(t, [2]int{3, 8}, [2]int{be.LocalRank, be.LocalSize})
	require.Equal(t, [2]int{be.LocalRank, be.LocalSize}, [2]int{cfg.LocalRank, cfg.LocalSize}, "Detect and ConfigFromEnv agree")
}
