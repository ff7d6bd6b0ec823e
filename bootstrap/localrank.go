package bootstrap

import (
	"fmt"
	"strconv"
	"strings"
)

// LocalRankVars are the variables that give a process's rank among those of its
// node, in the order LocalRank reads them: ibcoll's own, then Open MPI's, Slurm's,
// torchrun's and MPICH's.
var LocalRankVars = []string{"IBCOLL_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK", "MPI_LOCALRANKID"}

// LocalRank reads the process's local rank through getenv (os.Getenv in a
// program) from the first of LocalRankVars that is set, without needing the
// launcher's rank and size variables as Detect does: a single process started
// by srun or torchrun still learns which GPU is its own. from names the
// variable; ok is false when none is set. A malformed value is an error naming
// the variable.
func LocalRank(getenv func(string) string) (rank int, from string, ok bool, err error) {
	return firstCount(getenv, "LocalRank", LocalRankVars, "a local rank", 0)
}

// LocalSizeVars are the variables that give how many processes of the job run on the
// process's node, in the order LocalSize reads them: ibcoll's own, then Open MPI's,
// Slurm's (set with --ntasks-per-node), torchrun's and MPICH's.
var LocalSizeVars = []string{"IBCOLL_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS"}

// LocalSize reads how many processes of the job share this process's node through
// getenv, from the first of LocalSizeVars that is set, as LocalRank reads the local
// rank: whether the node has a core for each of them decides how long a waiting rank
// polls before it sleeps (coll.Config.LocalSize). from names the variable; ok is false
// when none is set. A value below 1 or malformed is an error naming the variable.
func LocalSize(getenv func(string) string) (size int, from string, ok bool, err error) {
	return firstCount(getenv, "LocalSize", LocalSizeVars, "a local size", 1)
}

// firstCount reads the first of vars that is set as an integer of at least least;
// what names it in the error.
func firstCount(getenv func(string) string, fn string, vars []string, what string, least int) (n int, from string, ok bool, err error) {
	if getenv == nil {
		return 0, "", false, fmt.Errorf("bootstrap: %s: getenv is nil", fn)
	}
	for _, v := range vars {
		s := strings.TrimSpace(getenv(v))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < least {
			return 0, v, false, fmt.Errorf("bootstrap: $%s is %q, want %s >= %d", v, s, what, least)
		}
		return n, v, true, nil
	}
	return 0, "", false, nil
}
