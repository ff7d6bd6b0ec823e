package coll_test

import (
	"errors"
	"fmt"
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
		coll.TrafficClassEnv:                 "106",
		coll.ServiceLevelEnv:                 "5",
		coll.PKeyIndexEnv:                    "2",
		coll.SoftGPUDirectEnv:                "true",
		coll.SoftDMUncachedEnv:               "1",
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
	require.Equal(t, [3]int{106, 5, 2}, [3]int{cfg.TrafficClass, cfg.ServiceLevel, cfg.PKeyIndex})
	require.True(t, cfg.SoftGPUDirect)
	require.True(t, cfg.SoftDMUncached)
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
	require.False(t, cfg.SoftGPUDirect || cfg.SoftDMUncached, "soft0's stand-ins are off without their variables")

	for _, kv := range [][2]string{{coll.GIDIndexEnv, "x"}, {coll.CUDADeviceEnv, "-1"}, {coll.AllOrNothingEnv, "maybe"},
		{"LOCAL_WORLD_SIZE", "0"},
		// The address handle keeps a GID index in 8 bits, the driver a device
		// ordinal in an int (4294967296 wrapped to device 0).
		{coll.GIDIndexEnv, "256"}, {coll.CUDADeviceEnv, "4294967296"},
		{coll.TrafficClassEnv, "256"}, {coll.ServiceLevelEnv, "16"}, {coll.PKeyIndexEnv, "-1"}, {coll.TrafficClassEnv, "af"},
		{coll.SoftGPUDirectEnv, "yes"}, {coll.SoftDMUncachedEnv, "2"}} {
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
	for _, c := range []struct {
		cfg  coll.Config
		name string
	}{{coll.Config{TrafficClass: 256}, "Config.TrafficClass"}, {coll.Config{ServiceLevel: -1}, "Config.ServiceLevel"},
		{coll.Config{PKeyIndex: 1 << 16}, "Config.PKeyIndex"}, {coll.Config{PKeyIndex: 1}, "coll.Config.PKeyIndex"}} {
		c.cfg.Device = "soft0"
		_, err = coll.NewContext(c.cfg)
		require.ErrorIs(t, err, coll.ErrInvalid, "%+v", c.cfg)
		require.ErrorContains(t, err, c.name, "soft0's partition key table has one key")
	}
	// In range, they reach the transport's QPs (verbs' TestContractPath reads them back).
	ctx, err := coll.NewContext(coll.Config{Device: "soft0", TrafficClass: 104, ServiceLevel: 3})
	require.NoError(t, err)
	require.NoError(t, ctx.Close())
}

// TestConfigFromEnvFollowsLauncher: the local rank and size come from the launcher
// that bootstrap.Detect picks, and the two agree. torchrun inside a Slurm allocation
// passes Slurm's variables on to its workers; reading SLURM_LOCALID and
// SLURM_NTASKS_PER_NODE first (before session 40) gave every worker of a node local
// rank 0 and size 1, so each took GPU 0's HCA and thought it had the node to itself.
// Under srun --mpi=pmi2 the PMI launcher has no local variables of its own, and
// SLURM_LOCALID gives the local rank to both.
func TestConfigFromEnvFollowsLauncher(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    map[string]string
		source string
		local  [2]int // Detect's local rank and size (-1: unknown)
	}{
		{"torchrun under slurm", map[string]string{"RANK": "11", "WORLD_SIZE": "16", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "n0",
			"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1", "SLURM_LAUNCH_NODE_IPADDR": "n0"},
			bootstrap.SourceTorchrun, [2]int{3, 8}},
		{"srun --mpi=pmi2", map[string]string{"PMI_RANK": "3", "PMI_SIZE": "8", "SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
			"SLURM_LAUNCH_NODE_IPADDR": "n0"},
			bootstrap.SourcePMI, [2]int{1, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			be, ok, err := bootstrap.Detect(getenv)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, tc.source, be.Source)
			require.Equal(t, tc.local, [2]int{be.LocalRank, be.LocalSize})
			cfg, err := coll.ConfigFromEnv(coll.Config{}, getenv)
			require.NoError(t, err)
			require.Equal(t, be.LocalRank, cfg.LocalRank, "Detect and ConfigFromEnv agree")
			if be.LocalSize > 0 {
				require.Equal(t, be.LocalSize, cfg.LocalSize, "Detect and ConfigFromEnv agree")
			}
		})
	}
}

// TestCUDADeviceZeroFromEnv: $IBCOLL_CUDA_DEVICE=0 fixes CUDA device 0 as any other
// ordinal fixes its device, refused where the process uses another; Config.CUDADevice 0
// without it is unset and selects nothing.
func TestCUDADeviceZeroFromEnv(t *testing.T) {
	var used []int
	busy := false
	t.Cleanup(coll.SetPlacement(nil, errors.New("no topology in this test"), func(n int) error {
		if busy {
			return fmt.Errorf("this process already uses CUDA device 2: %w", coll.ErrBusy)
		}
		used = append(used, n)
		return nil
	}))
	cfg, err := coll.ConfigFromEnv(coll.Config{Device: "soft0"}, func(k string) string {
		if k == coll.CUDADeviceEnv {
			return "0"
		}
		return ""
	})
	require.NoError(t, err)
	ctx, err := coll.NewContext(cfg)
	require.NoError(t, err)
	require.NoError(t, ctx.Close())
	require.Equal(t, []int{0}, used)

	used = nil
	ctx, err = coll.NewContext(coll.Config{Device: "soft0"})
	require.NoError(t, err)
	require.NoError(t, ctx.Close())
	require.Empty(t, used, "Config.CUDADevice 0 alone selected a device")

	busy = true
	_, err = coll.NewContext(cfg)
	require.ErrorIs(t, err, coll.ErrBusy)
	require.ErrorContains(t, err, "Config.CUDADevice")
}
