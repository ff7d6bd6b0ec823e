package bootstrap

import (
	"fmt"
	"strconv"
	"strings"
)

// LocalRankVars are the variables that give a process's rank among those of its
// node, in the order LocalRank reads them: ibcoll's own, then torchrun's, Open
// MPI's, MPICH's and Slurm's, the launchers' order in Detect (Slurm's last: a
// launcher started inside an allocation passes them on, where SLURM_LOCALID is
// the launcher's own task's, so every worker of a torchrun under sbatch or srun
// saw local rank 0).
var LocalRankVars = []string{"IBCOLL_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", slurmLocalID}

// slurmLocalID is srun's local rank of a task; LocalRank reads it only where Slurm
// started the process (as LocalSize reads slurmStepTasks).
const slurmLocalID = "SLURM_LOCALID"

// LocalRank reads the process's local rank through getenv (os.Getenv in a
// program) without needing the launcher's rank and size variables as Detect
// does: a single process started by srun or torchrun still learns which GPU is
// its own. Where a launcher is present by Detect's rule (its rank or size
// variable is set), its own local rank variable is read first, so the two
// agree; then the first of LocalRankVars that is set (SLURM_LOCALID only where
// Slurm started the process, as for Detect). from names the variable;
// ok is false when none is set. A malformed value is an error naming the
// variable.
func LocalRank(getenv func(string) string) (rank int, from string, ok bool, err error) {
	return firstCount(getenv, "LocalRank", func(l *launcher) string { return l.localRank }, LocalRankVars, "a local rank", 0)
}

// LocalSizeVars are the variables that give how many processes of the job run on the
// process's node, in the order LocalSize reads them: ibcoll's own, then torchrun's,
// Open MPI's, MPICH's and Slurm's, as LocalRankVars. Slurm's is the step's count per
// node, a list such as "4(x2),3" (SLURM_NTASKS_PER_NODE is the allocation's, which a
// step may exceed); LocalSize takes its largest count, since a node whose processes
// are overestimated only polls less, and reads it only where Slurm started the
// process (no other launcher is present, or srun is the PMI launcher): a launcher
// started inside a step passes on that step's count, such as the 1 of an srun -n 1.
var LocalSizeVars = []string{"IBCOLL_LOCAL_SIZE", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", slurmStepTasks}

// slurmStepTasks is srun's count of the step's tasks on each of its nodes.
const slurmStepTasks = "SLURM_STEP_TASKS_PER_NODE"

// LocalSize reads how many processes of the job share this process's node through
// getenv, as LocalRank reads the local rank (the present launcher's variable first,
// then the first of LocalSizeVars that is set): whether the node has a core for each
// of them decides how long a waiting rank polls before it sleeps
// (coll.Config.LocalSize). from names the variable; ok is false when none is set. A
// value below 1 or malformed is an error naming the variable.
func LocalSize(getenv func(string) string) (size int, from string, ok bool, err error) {
	return firstCount(getenv, "LocalSize", func(l *launcher) string { return l.localSize }, LocalSizeVars, "a local size", 1)
}

// firstCount reads, as an integer of at least least, the present launcher's
// variable (own(l)), else the first of vars that is set; what names it in the
// error.
func firstCount(getenv func(string) string, fn string, own func(*launcher) string, vars []string, what string, least int) (n int, from string, ok bool, err error) {
	if getenv == nil {
		return 0, "", false, fmt.Errorf("bootstrap: %s: getenv is nil", fn)
	}
	l := present(getenv)
	if l != nil && own(l) != "" {
		vars = append([]string{own(l)}, vars...)
	}
	// Slurm's variables describe this process only where Slurm started it: a launcher
	// started inside a step or an sbatch script passes on that task's.
	slurmStarted := l == nil || l.source == SourceSlurm || (l.source == SourcePMI && l.srunIsPMI(getenv))
	for _, v := range vars {
		s := strings.TrimSpace(getenv(v))
		if s == "" || ((v == slurmStepTasks || v == slurmLocalID) && !slurmStarted) {
			continue
		}
		n, err := strconv.Atoi(s)
		if v == slurmStepTasks {
			n, err = largestSlurmCount(s)
		}
		if err != nil || n < least {
			return 0, v, false, fmt.Errorf("bootstrap: $%s is %q, want %s >= %d", v, s, what, least)
		}
		return n, v, true, nil
	}
	return 0, "", false, nil
}

// largestSlurmCount is the largest count of a Slurm per-node list: counts separated by
// commas, each optionally followed by "(xN)", its repetition.
func largestSlurmCount(s string) (int, error) {
	most := 0
	for _, f := range strings.Split(s, ",") {
		count, rep, repeated := strings.Cut(strings.TrimSpace(f), "(x")
		if repeated {
			digits := strings.TrimSuffix(rep, ")")
			r, err := strconv.Atoi(digits)
			if err != nil || !strings.HasSuffix(rep, ")") || r < 1 || digits[0] < '0' || digits[0] > '9' {
				return 0, fmt.Errorf("bad repetition in %q", f)
			}
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 || count[0] < '0' || count[0] > '9' {
			return 0, fmt.Errorf("bad count in %q", f)
		}
		most = max(most, n)
	}
	return most, nil
}
