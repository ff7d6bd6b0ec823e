package bootstrap

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

type vars map[string]string

func (v vars) get(k string) string { return v[k] }

func TestDetect(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  vars
		want Env
	}{
		{"ibcoll", vars{"IBCOLL_RANK": "3", "IBCOLL_SIZE": "4", "IBCOLL_STORE": "node1:1234"},
			Env{Rank: 3, Size: 4, Store: "node1:1234", Source: SourceIBColl, LocalRank: -1, LocalSize: -1}},
		{"ibcoll local", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "4", "IBCOLL_STORE": "10.0.0.1:1", "IBCOLL_LOCAL_RANK": "0", "IBCOLL_LOCAL_SIZE": "2"},
			Env{Rank: 0, Size: 4, Store: "10.0.0.1:1", Source: SourceIBColl, LocalRank: 0, LocalSize: 2}},
		{"ibcoll ipv6", vars{"IBCOLL_RANK": "1", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "[fd00::1]:29500", "IBCOLL_STORE_EXTERNAL": "1"},
			Env{Rank: 1, Size: 2, Store: "[fd00::1]:29500", Source: SourceIBColl, LocalRank: -1, LocalSize: -1, External: true}},
		{"torchrun", vars{"RANK": "5", "WORLD_SIZE": "8", "MASTER_ADDR": "host0", "MASTER_PORT": "29400", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"},
			Env{Rank: 5, Size: 8, Store: "host0:29400", Source: SourceTorchrun, LocalRank: 1, LocalSize: 4}},
		{"torchrun default port", vars{"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "host0"},
			Env{Rank: 0, Size: 1, Store: "host0:29500", Source: SourceTorchrun, LocalRank: -1, LocalSize: -1}},
		{"torchrun agent store holds MASTER_PORT", vars{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29400", "TORCHELASTIC_USE_AGENT_STORE": "True"},
			Env{Rank: 1, Size: 2, Store: "h:29401", Source: SourceTorchrun, LocalRank: -1, LocalSize: -1}},
		{"torchrun IBCOLL_STORE_PORT", vars{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29400", "TORCHELASTIC_USE_AGENT_STORE": "True", "IBCOLL_STORE_PORT": "7000"},
			Env{Rank: 1, Size: 2, Store: "h:7000", Source: SourceTorchrun, LocalRank: -1, LocalSize: -1}},
		{"torchrun IBCOLL_STORE", vars{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "IBCOLL_STORE": "other:1"},
			Env{Rank: 1, Size: 2, Store: "other:1", Source: SourceTorchrun, LocalRank: -1, LocalSize: -1}},
		{"torchrun ipv6 master", vars{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "fd00::2", "MASTER_PORT": "5"},
			Env{Rank: 1, Size: 2, Store: "[fd00::2]:5", Source: SourceTorchrun, LocalRank: -1, LocalSize: -1}},
		{"openmpi IBCOLL_STORE", vars{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "IBCOLL_STORE": "head:9000"},
			Env{Rank: 2, Size: 3, Store: "head:9000", Source: SourceOpenMPI, LocalRank: 0, LocalSize: 1}},
		{"openmpi MASTER_ADDR", vars{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3", "MASTER_ADDR": "head", "MASTER_PORT": "9001"},
			Env{Rank: 2, Size: 3, Store: "head:9001", Source: SourceOpenMPI, LocalRank: -1, LocalSize: -1}},
		{"slurm", vars{"SLURM_PROCID": "7", "SLURM_NTASKS": "16", "SLURM_LOCALID": "3", "SLURM_LAUNCH_NODE_IPADDR": "10.1.2.3"},
			Env{Rank: 7, Size: 16, Store: "10.1.2.3:29500", Source: SourceSlurm, LocalRank: 3, LocalSize: -1}},
		{"slurm port", vars{"SLURM_PROCID": "7", "SLURM_NTASKS": "16", "SLURM_LAUNCH_NODE_IPADDR": "10.1.2.3", "IBCOLL_STORE_PORT": "4242"},
			Env{Rank: 7, Size: 16, Store: "10.1.2.3:4242", Source: SourceSlurm, LocalRank: -1, LocalSize: -1}},
		{"slurm MASTER_ADDR first", vars{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LAUNCH_NODE_IPADDR": "10.1.2.3", "MASTER_ADDR": "node7"},
			Env{Rank: 0, Size: 2, Store: "node7:29500", Source: SourceSlurm, LocalRank: -1, LocalSize: -1}},
		{"pmi", vars{"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "IBCOLL_STORE": "h:1"},
			Env{Rank: 1, Size: 2, Store: "h:1", Source: SourcePMI, LocalRank: 1, LocalSize: 2}},
		{"spaces", vars{"IBCOLL_RANK": " 1 ", "IBCOLL_SIZE": "2\n", "IBCOLL_STORE": "h:1"},
			Env{Rank: 1, Size: 2, Store: "h:1", Source: SourceIBColl, LocalRank: -1, LocalSize: -1}},

		// Precedence: the first launcher present wins.
		{"ibcoll over torchrun", vars{"IBCOLL_RANK": "1", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "a:1", "RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "b"},
			Env{Rank: 1, Size: 2, Store: "a:1", Source: SourceIBColl, LocalRank: -1, LocalSize: -1}},
		{"torchrun over openmpi", vars{"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "b", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8"},
			Env{Rank: 3, Size: 4, Store: "b:29500", Source: SourceTorchrun, LocalRank: -1, LocalSize: -1}},
		{"openmpi over slurm", vars{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "IBCOLL_STORE": "c:2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
			Env{Rank: 1, Size: 2, Store: "c:2", Source: SourceOpenMPI, LocalRank: -1, LocalSize: -1}},
		// MPICH's mpiexec in an sbatch script: its processes inherit the batch
		// step's SLURM_PROCID=0 (every one would be rank 0 if Slurm won).
		{"pmi over slurm", vars{"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "4",
			"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1", "SLURM_LAUNCH_NODE_IPADDR": "d"},
			Env{Rank: 2, Size: 4, Store: "d:29500", Source: SourcePMI, LocalRank: 2, LocalSize: 4}},
		// torchrun under sbatch or srun (one per node): Slurm's variables are the
		// launcher's task's, torchrun's the worker's.
		{"torchrun over slurm", vars{"RANK": "11", "WORLD_SIZE": "16", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "8", "MASTER_ADDR": "n0",
			"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "1"},
			Env{Rank: 11, Size: 16, Store: "n0:29500", Source: SourceTorchrun, LocalRank: 3, LocalSize: 8}},
		// SLURM_NTASKS_PER_NODE is the allocation's, not the step's: sbatch
		// --ntasks-per-node=40, then srun -n 1.
		{"slurm step smaller than the allocation", vars{"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "40", "SLURM_LAUNCH_NODE_IPADDR": "d"},
			Env{Rank: 0, Size: 1, Store: "d:29500", Source: SourceSlurm, LocalRank: 0, LocalSize: -1}},
		// srun --mpi=pmi2: PMI's rank and size are Slurm's, and no MPI_LOCALRANKID.
		{"srun as the PMI launcher", vars{"PMI_RANK": "3", "PMI_SIZE": "8", "PMI_FD": "7", "SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_LAUNCH_NODE_IPADDR": "d"},
			Env{Rank: 3, Size: 8, Store: "d:29500", Source: SourcePMI, LocalRank: 1, LocalSize: -1}},
		// MPICH's mpiexec in an sbatch script, without MPI_LOCALRANKID: PMI's rank
		// and size are not Slurm's (the batch step's), so SLURM_LOCALID is not the
		// process's local rank, even where the ranks happen to agree.
		{"pmi under a slurm step it is not", vars{"PMI_RANK": "0", "PMI_SIZE": "4", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
			"SLURM_LOCALID": "0", "IBCOLL_STORE": "h:1"},
			Env{Rank: 0, Size: 4, Store: "h:1", Source: SourcePMI, LocalRank: -1, LocalSize: -1}},
		{"IBCOLL_STORE alone does not make a launcher", vars{"IBCOLL_STORE": "h:1", "PMI_RANK": "0", "PMI_SIZE": "1"},
			Env{Rank: 0, Size: 1, Store: "h:1", Source: SourcePMI, LocalRank: -1, LocalSize: -1}},
		{"MASTER_ADDR alone does not make torchrun", vars{"MASTER_ADDR": "m", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},
			Env{Rank: 0, Size: 1, Store: "m:29500", Source: SourceOpenMPI, LocalRank: -1, LocalSize: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := Detect(c.env.get)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, c.want, got)
		})
	}
}

func TestDetectNone(t *testing.T) {
	t.Parallel()
	for _, env := range []vars{
		{},
		{"IBCOLL_STORE": "h:1", "MASTER_ADDR": "m", "MASTER_PORT": "1", "SLURM_LAUNCH_NODE_IPADDR": "s", "IBCOLL_STORE_EXTERNAL": "1", "LOCAL_RANK": "0"},
	} {
		got, ok, err := Detect(env.get)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, Env{}, got)
	}
}

func TestDetectErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     vars
		source  string
		badVar  string
		message string
	}{
		{"ibcoll no size", vars{"IBCOLL_RANK": "0", "IBCOLL_STORE": "h:1"}, SourceIBColl, "IBCOLL_SIZE", "not set"},
		{"ibcoll no rank", vars{"IBCOLL_SIZE": "2", "IBCOLL_STORE": "h:1"}, SourceIBColl, "IBCOLL_RANK", "not set"},
		{"ibcoll no store", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "2", "MASTER_ADDR": "m"}, SourceIBColl, "IBCOLL_STORE", "not set"},
		{"rank = size", vars{"IBCOLL_RANK": "2", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "h:1"}, SourceIBColl, "IBCOLL_RANK", "below IBCOLL_SIZE=2"},
		{"size 0", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "0", "IBCOLL_STORE": "h:1"}, SourceIBColl, "IBCOLL_SIZE", "at least 1"},
		{"negative rank", vars{"IBCOLL_RANK": "-1", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "h:1"}, SourceIBColl, "IBCOLL_RANK", "non-negative integer"},
		{"rank not a number", vars{"IBCOLL_RANK": "one", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "h:1"}, SourceIBColl, "IBCOLL_RANK", "non-negative integer"},
		{"store without port", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "h"}, SourceIBColl, "IBCOLL_STORE", "not host:port"},
		{"store without host", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "2", "IBCOLL_STORE": ":29500"}, SourceIBColl, "IBCOLL_STORE", "no host"},
		{"store port 0", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "h:0"}, SourceIBColl, "IBCOLL_STORE", "1 to 65535"},
		{"store port 65536", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "h:65536"}, SourceIBColl, "IBCOLL_STORE", "1 to 65535"},
		{"store port name", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "h:http"}, SourceIBColl, "IBCOLL_STORE", "1 to 65535"},
		{"external not bool", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "h:1", "IBCOLL_STORE_EXTERNAL": "maybe"}, SourceIBColl, "IBCOLL_STORE_EXTERNAL", "boolean"},
		{"local rank >= local size", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "4", "IBCOLL_STORE": "h:1", "IBCOLL_LOCAL_RANK": "2", "IBCOLL_LOCAL_SIZE": "2"}, SourceIBColl, "IBCOLL_LOCAL_RANK", "below IBCOLL_LOCAL_SIZE=2"},
		{"local size 0", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "4", "IBCOLL_STORE": "h:1", "IBCOLL_LOCAL_SIZE": "0"}, SourceIBColl, "IBCOLL_LOCAL_SIZE", "1 to IBCOLL_SIZE=4"},
		{"local size > size", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "4", "IBCOLL_STORE": "h:1", "IBCOLL_LOCAL_SIZE": "5"}, SourceIBColl, "IBCOLL_LOCAL_SIZE", "1 to IBCOLL_SIZE=4"},
		{"torchrun no master", vars{"RANK": "0", "WORLD_SIZE": "2"}, SourceTorchrun, "MASTER_ADDR", "no store address"},
		{"torchrun no world size", vars{"RANK": "0", "MASTER_ADDR": "m"}, SourceTorchrun, "WORLD_SIZE", "not set"},
		{"torchrun bad port", vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "70000"}, SourceTorchrun, "MASTER_PORT", "1 to 65535"},
		{"torchrun bad IBCOLL_STORE_PORT", vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "IBCOLL_STORE_PORT": "x"}, SourceTorchrun, "IBCOLL_STORE_PORT", "1 to 65535"},
		{"torchrun agent store at 65535", vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "65535", "TORCHELASTIC_USE_AGENT_STORE": "1"}, SourceTorchrun, "MASTER_PORT", "IBCOLL_STORE_PORT"},
		{"torchrun bad master", vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "tcp://m/"}, SourceTorchrun, "MASTER_ADDR", "not a host"},
		{"openmpi no address", vars{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, SourceOpenMPI, "MASTER_ADDR", "set IBCOLL_STORE, or MASTER_ADDR"},
		{"openmpi rank too big", vars{"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2", "IBCOLL_STORE": "h:1"}, SourceOpenMPI, "OMPI_COMM_WORLD_RANK", "below OMPI_COMM_WORLD_SIZE=2"},
		{"openmpi bad local", vars{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "x", "IBCOLL_STORE": "h:1"}, SourceOpenMPI, "OMPI_COMM_WORLD_LOCAL_RANK", "non-negative"},
		{"slurm no address", vars{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, SourceSlurm, "SLURM_LAUNCH_NODE_IPADDR", "MASTER_ADDR or SLURM_LAUNCH_NODE_IPADDR"},
		{"slurm no ntasks", vars{"SLURM_PROCID": "0", "SLURM_LAUNCH_NODE_IPADDR": "h"}, SourceSlurm, "SLURM_NTASKS", "not set"},
		{"pmi no address", vars{"PMI_RANK": "0", "PMI_SIZE": "2"}, SourcePMI, "SLURM_LAUNCH_NODE_IPADDR", "set IBCOLL_STORE, or MASTER_ADDR or SLURM_LAUNCH_NODE_IPADDR"},
		// Found by an audit of the environment (session 40): a host with a port,
		// or a store host with a space, failed only at the dial a minute later;
		// a malformed agent-store switch read as false.
		{"torchrun master with a port", vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1:29611"}, SourceTorchrun, "MASTER_ADDR", "a host with a port"},
		{"torchrun bracketed master with a port", vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "[::1]:29611"}, SourceTorchrun, "MASTER_ADDR", "a host with a port"},
		{"store host with a space", vars{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "2", "IBCOLL_STORE": "local host:29582"}, SourceIBColl, "IBCOLL_STORE", "not a host"},
		{"agent store not bool", vars{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "29400", "TORCHELASTIC_USE_AGENT_STORE": "abc"}, SourceTorchrun, "TORCHELASTIC_USE_AGENT_STORE", "boolean"},
		{"pmi bad store", vars{"PMI_RANK": "0", "PMI_SIZE": "2", "IBCOLL_STORE": "h:99999"}, SourcePMI, "IBCOLL_STORE", "1 to 65535"},
		// A present launcher with bad variables is an error, not a reason
		// to fall through to the next one.
		{"no fall-through", vars{"RANK": "0", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1", "IBCOLL_STORE": "h:1"}, SourceTorchrun, "WORLD_SIZE", "not set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, ok, err := Detect(c.env.get)
			require.True(t, ok, "a launcher is present")
			var ee *EnvError
			require.True(t, errors.As(err, &ee), "error %v is an *EnvError", err)
			require.Equal(t, c.source, ee.Source)
			require.Equal(t, c.badVar, ee.Var)
			require.Equal(t, c.env[c.badVar], ee.Value)
			require.ErrorContains(t, err, c.badVar)
			require.ErrorContains(t, err, c.message)
		})
	}
}

// TestDetectLocalErrorKeepsPlace: an error about the local rank or size alone leaves
// the rank, size and store in env, so that the process can meet the others to tell
// them why it stops; another error leaves no store.
func TestDetectLocalErrorKeepsPlace(t *testing.T) {
	env, ok, err := Detect(vars{"IBCOLL_RANK": "1", "IBCOLL_SIZE": "3", "IBCOLL_STORE": "h:1", "IBCOLL_LOCAL_RANK": "x"}.get)
	require.True(t, ok)
	require.ErrorContains(t, err, "IBCOLL_LOCAL_RANK")
	require.Equal(t, Env{Rank: 1, Size: 3, Store: "h:1", Source: SourceIBColl, LocalRank: -1, LocalSize: -1}, env)

	env, _, err = Detect(vars{"IBCOLL_RANK": "1", "IBCOLL_SIZE": "3", "IBCOLL_STORE": "h:1", "IBCOLL_LOCAL_RANK": "2", "IBCOLL_LOCAL_SIZE": "2"}.get)
	require.ErrorContains(t, err, "IBCOLL_LOCAL_RANK")
	require.Equal(t, "h:1", env.Store)
	require.Equal(t, [2]int{-1, -1}, [2]int{env.LocalRank, env.LocalSize})

	env, _, err = Detect(vars{"IBCOLL_RANK": "3", "IBCOLL_SIZE": "3", "IBCOLL_STORE": "h:1"}.get)
	require.ErrorContains(t, err, "IBCOLL_RANK")
	require.Empty(t, env.Store, "no place in the job")
}
