package bootstrap

import (
	"strings"
	"testing"
)

func TestLocalRank(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want int
		from string
		ok   bool
		err  string
	}{
		{map[string]string{}, 0, "", false, ""},
		{map[string]string{"LOCAL_RANK": "3"}, 3, "LOCAL_RANK", true, ""},
		// Slurm's variable is the last read: a launcher inside an allocation
		// passes it on (torchrun under srun: SLURM_LOCALID of the torchrun task).
		{map[string]string{"SLURM_LOCALID": "0", "LOCAL_RANK": "3"}, 3, "LOCAL_RANK", true, ""},
		{map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "2", "SLURM_LOCALID": "5"}, 2, "OMPI_COMM_WORLD_LOCAL_RANK", true, ""},
		{map[string]string{"MPI_LOCALRANKID": "2", "SLURM_LOCALID": "0"}, 2, "MPI_LOCALRANKID", true, ""},
		{map[string]string{"SLURM_LOCALID": "5"}, 5, "SLURM_LOCALID", true, ""},
		// The launcher Detect picks reads its own variable first, so the two agree
		// (here Open MPI's, with a LOCAL_RANK from elsewhere in the environment).
		{map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "LOCAL_RANK": "0"}, 1, "OMPI_COMM_WORLD_LOCAL_RANK", true, ""},
		{map[string]string{"IBCOLL_LOCAL_RANK": "7", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}, 7, "IBCOLL_LOCAL_RANK", true, ""},
		{map[string]string{"MPI_LOCALRANKID": "1"}, 1, "MPI_LOCALRANKID", true, ""},
		{map[string]string{"LOCAL_RANK": "x"}, 0, "LOCAL_RANK", false, "LOCAL_RANK"},
		{map[string]string{"SLURM_LOCALID": "-1"}, 0, "SLURM_LOCALID", false, "SLURM_LOCALID"},
	}
	for _, c := range cases {
		n, from, ok, err := LocalRank(func(k string) string { return c.env[k] })
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want one naming %s", c.env, err, c.err)
			}
			continue
		}
		if err != nil || n != c.want || from != c.from || ok != c.ok {
			t.Errorf("%v: %d %q %v %v, want %d %q %v", c.env, n, from, ok, err, c.want, c.from, c.ok)
		}
	}
	if _, _, _, err := LocalRank(nil); err == nil {
		t.Error("nil getenv: no error")
	}
}

func TestLocalSize(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want int
		from string
		ok   bool
		err  string
	}{
		{map[string]string{}, 0, "", false, ""},
		{map[string]string{"LOCAL_WORLD_SIZE": "8"}, 8, "LOCAL_WORLD_SIZE", true, ""},
		{map[string]string{"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "LOCAL_WORLD_SIZE": "8"}, 8, "LOCAL_WORLD_SIZE", true, ""},
		{map[string]string{"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "LOCAL_WORLD_SIZE": "8"}, 2, "OMPI_COMM_WORLD_LOCAL_SIZE", true, ""},
		{map[string]string{"LOCAL_WORLD_SIZE": "8", "SLURM_STEP_TASKS_PER_NODE": "1"}, 8, "LOCAL_WORLD_SIZE", true, ""},
		{map[string]string{"IBCOLL_LOCAL_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 4, "IBCOLL_LOCAL_SIZE", true, ""},
		// The allocation's count is no step's: a step of srun -n 8 on an allocation of
		// --ntasks-per-node=1 runs 8 processes on a node.
		{map[string]string{"SLURM_NTASKS_PER_NODE": "1"}, 0, "", false, ""},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "16"}, 16, "SLURM_STEP_TASKS_PER_NODE", true, ""},
		{map[string]string{"SLURM_NTASKS_PER_NODE": "1", "SLURM_STEP_TASKS_PER_NODE": "8"}, 8, "SLURM_STEP_TASKS_PER_NODE", true, ""},
		// Nodes of a step may run different counts: the largest is taken.
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "3,5(x2),2"}, 5, "SLURM_STEP_TASKS_PER_NODE", true, ""},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "4(x16)"}, 4, "SLURM_STEP_TASKS_PER_NODE", true, ""},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "4(x"}, 0, "", false, "SLURM_STEP_TASKS_PER_NODE"},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "4(x0)"}, 0, "", false, "SLURM_STEP_TASKS_PER_NODE"},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "0,0"}, 0, "", false, "SLURM_STEP_TASKS_PER_NODE"},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "2,,3"}, 0, "", false, "SLURM_STEP_TASKS_PER_NODE"},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "5,-1"}, 0, "", false, "SLURM_STEP_TASKS_PER_NODE"},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "3(x1),0"}, 0, "", false, "SLURM_STEP_TASKS_PER_NODE"},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "+3"}, 0, "", false, "SLURM_STEP_TASKS_PER_NODE"},
		{map[string]string{"SLURM_STEP_TASKS_PER_NODE": "2(x+3)"}, 0, "", false, "SLURM_STEP_TASKS_PER_NODE"},
		// Slurm's count is the step's: a launcher started in a step of one task passes
		// on its 1, which says nothing of the launcher's own processes.
		{map[string]string{"IBCOLL_RANK": "0", "IBCOLL_SIZE": "8", "SLURM_STEP_TASKS_PER_NODE": "1"}, 0, "", false, ""},
		{map[string]string{"PMI_RANK": "3", "PMI_SIZE": "8", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_TASKS_PER_NODE": "1"}, 0, "", false, ""},
		// srun as the PMI launcher: the step is the job.
		{map[string]string{"PMI_RANK": "3", "PMI_SIZE": "8", "SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}, 4, "SLURM_STEP_TASKS_PER_NODE", true, ""},
		{map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_STEP_TASKS_PER_NODE": "4(x2)"}, 4, "SLURM_STEP_TASKS_PER_NODE", true, ""},
		{map[string]string{"MPI_LOCALNRANKS": " 3 "}, 3, "MPI_LOCALNRANKS", true, ""},
		{map[string]string{"LOCAL_WORLD_SIZE": "0"}, 0, "", false, "LOCAL_WORLD_SIZE"},
		{map[string]string{"MPI_LOCALNRANKS": "two"}, 0, "", false, "MPI_LOCALNRANKS"},
	}
	for _, c := range cases {
		n, from, ok, err := LocalSize(func(k string) string { return c.env[k] })
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: err %v, want one naming %s", c.env, err, c.err)
			}
			continue
		}
		if err != nil || n != c.want || from != c.from || ok != c.ok {
			t.Errorf("%v: %d %q %v %v, want %d %q %v", c.env, n, from, ok, err, c.want, c.from, c.ok)
		}
	}
	if _, _, _, err := LocalSize(nil); err == nil {
		t.Error("nil getenv: no error")
	}
}
