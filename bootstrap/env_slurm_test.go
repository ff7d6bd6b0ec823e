package bootstrap

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSallocIsNoLauncher: an salloc shell (or an sbatch script) exports the
// allocation's SLURM_NTASKS but no SLURM_PROCID, since no srun launched a task there:
// that is no launcher, so a program run there falls back as without one (ibcoll-perf
// runs its in-process ranks), instead of a broken Slurm launcher that fails naming
// SLURM_PROCID. A task that srun launched has both, and a partial set of another
// launcher is still an error. (Found by a review.)
func TestSallocIsNoLauncher(t *testing.T) {
	_, ok, err := Detect(vars{"SLURM_JOB_ID": "42", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_NNODES": "1"}.get)
	require.NoError(t, err)
	require.False(t, ok, "an allocation without a launched task is no launcher")

	env, ok, err := Detect(vars{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "MASTER_ADDR": "node0"}.get)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, SourceSlurm, env.Source)
	require.Equal(t, 2, env.Rank)
	require.Equal(t, 4, env.Size)

	_, ok, err = Detect(vars{"WORLD_SIZE": "4", "MASTER_ADDR": "node0"}.get)
	require.True(t, ok)
	require.ErrorContains(t, err, "RANK", "torchrun's size without its rank is a broken launcher")
}

// TestLocalRankIgnoresInheritedSlurm: processes started by the program's own launcher
// (IBCOLL_RANK/SIZE/STORE, no IBCOLL_LOCAL_RANK) inside an sbatch script inherit the
// batch step's SLURM_LOCALID=0. Neither Detect nor LocalRank takes it as their local
// rank (every process would claim GPU 0 and its card), as LocalSize already did not
// take the step's count; where srun started the process, SLURM_LOCALID is its local
// rank. (LocalRank said 0 where Detect said it did not know: found by a review.)
func TestLocalRankIgnoresInheritedSlurm(t *testing.T) {
	for r := 0; r < 4; r++ {
		v := vars{"IBCOLL_RANK": strconv.Itoa(r), "IBCOLL_SIZE": "4", "IBCOLL_STORE": "node0:29500",
			"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "1"}
		env, ok, err := Detect(v.get)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, -1, env.LocalRank, "rank %d", r)
		_, from, lok, err := LocalRank(v.get)
		require.NoError(t, err)
		require.False(t, lok, "rank %d: LocalRank took %s", r, from)
		_, from, sok, err := LocalSize(v.get)
		require.NoError(t, err)
		require.False(t, sok, "rank %d: LocalSize took %s", r, from)
	}
	lr, from, ok, err := LocalRank(vars{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}.get)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, lr)
	require.Equal(t, "SLURM_LOCALID", from)
}
