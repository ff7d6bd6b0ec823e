package bootstrap

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Environment variables read by Detect besides the launchers' own.
const (
	// StoreEnv is the store address, host:port. It is required with
	// IBCOLL_RANK/IBCOLL_SIZE, and when set it is the address for every
	// launcher.
	StoreEnv = "IBCOLL_STORE"
	// StorePortEnv overrides the port when the host comes from a
	// launcher (MASTER_ADDR, SLURM_LAUNCH_NODE_IPADDR).
	StorePortEnv = "IBCOLL_STORE_PORT"
	// ExternalEnv, when true (1, t, true), says a separate process serves
	// the store: rank 0 does not start one in Connect.
	ExternalEnv = "IBCOLL_STORE_EXTERNAL"
	// DefaultPort is the store port when only a host is known, torchrun's
	// default.
	DefaultPort = 29500
)

// Launcher names, as Env.Source reports them.
const (
	SourceIBColl   = "ibcoll"
	SourceTorchrun = "torchrun"
	SourceOpenMPI  = "openmpi"
	SourceSlurm    = "slurm"
	SourcePMI      = "pmi"
)

// Env is a process's place in a multi-process run, as a launcher
// describes it.
type Env struct {
	Rank, Size int
	// Store is the store address, host:port.
	Store string
	// Source names the launcher whose variables were used (Source*).
	Source string
	// LocalRank and LocalSize place the process among those of its node;
	// -1 when the launcher does not say.
	LocalRank, LocalSize int
	// External is $IBCOLL_STORE_EXTERNAL: rank 0 does not serve the store.
	External bool
	// Token is $IBCOLL_STORE_TOKEN, the store's shared secret ("" for none);
	// Connect uses it where its options set none.
	Token string
}

// EnvError reports a launcher environment that is present but unusable.
type EnvError struct {
	Source string // the launcher (Source*)
	Var    string // the variable at fault
	Value  string // its value ("" when unset)
	Reason string
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("bootstrap: %s launcher: %s=%q: %s", e.Source, e.Var, e.Value, e.Reason)
}

type launcher struct {
	source               string
	rankVar, sizeVar     string
	localRank, localSize string
	storeOnly            bool     // IBCOLL_STORE is the only address
	hostVars             []string // variables giving a host, in order, when IBCOLL_STORE is unset
	// rankOnly: only the rank variable says the launcher started this process
	// (Slurm: salloc and sbatch export SLURM_NTASKS, the allocation's, to a shell
	// or script that no srun launched).
	rankOnly bool
}

// The launchers in order of precedence. A launcher is present when its
// rank or size variable is set; the first present one is used. Slurm comes
// last: a launcher started inside an allocation (torchrun, mpirun, MPICH's
// mpiexec in an sbatch script, or under srun one per node) passes Slurm's
// variables on to its processes, where SLURM_PROCID and SLURM_LOCALID describe
// the batch script or the launcher's own task, not the process (every process
// would claim rank 0). Where srun itself is the PMI launcher (--mpi=pmi2), the
// two agree.
var launchers = []launcher{
	{SourceIBColl, "IBCOLL_RANK", "IBCOLL_SIZE", "IBCOLL_LOCAL_RANK", "IBCOLL_LOCAL_SIZE", true, nil, false},
	{SourceTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false, []string{"MASTER_ADDR"}, false},
	{SourceOpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", false, []string{"MASTER_ADDR"}, false},
	{SourcePMI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", false, []string{"MASTER_ADDR", "SLURM_LAUNCH_NODE_IPADDR"}, false},
	{SourceSlurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "", false, []string{"MASTER_ADDR", "SLURM_LAUNCH_NODE_IPADDR"}, true},
}

// present is the first launcher whose rank or size variable is set (Slurm: its rank
// variable), as Detect picks it; nil when none is.
func present(getenv func(string) string) *launcher {
	for i := range launchers {
		l := &launchers[i]
		if getenv(l.rankVar) != "" || !l.rankOnly && getenv(l.sizeVar) != "" {
			return l
		}
	}
	return nil
}

// Detect finds the launcher that started this process and reads rank,
// size and store address from its variables through getenv (os.Getenv, or
// a map in tests). Launchers are tried in this order; the first whose rank
// or size variable is set wins (Slurm's rank variable: an salloc shell or an
// sbatch script has SLURM_NTASKS, but no task of a step runs there):
//
//  1. IBCOLL_RANK, IBCOLL_SIZE, IBCOLL_STORE (+ IBCOLL_LOCAL_RANK/_SIZE)
//  2. torchrun: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (+ LOCAL_RANK,
//     LOCAL_WORLD_SIZE)
//  3. Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (+ _LOCAL_RANK,
//     _LOCAL_SIZE); address from IBCOLL_STORE or MASTER_ADDR
//  4. PMI (MPICH Hydra, srun --mpi=pmi2): PMI_RANK, PMI_SIZE (+
//     MPI_LOCALRANKID, MPI_LOCALNRANKS; under srun SLURM_LOCALID); address
//     from IBCOLL_STORE, MASTER_ADDR, or SLURM_LAUNCH_NODE_IPADDR (the node
//     where the batch script or salloc runs)
//  5. Slurm: SLURM_PROCID, SLURM_NTASKS (+ SLURM_LOCALID); address from
//     IBCOLL_STORE, MASTER_ADDR, or SLURM_LAUNCH_NODE_IPADDR
//
// Slurm is last because the launchers before it, started inside an
// allocation, pass its variables on to processes they describe themselves
// (MPICH's mpiexec in an sbatch script: every process inherits the batch
// step's SLURM_PROCID=0). The price: PMI variables inherited from an outer
// job step (an interactive srun under MpiDefault=pmi2) that a nested srun with
// another PMI plugin does not overwrite win over that srun's Slurm variables;
// set IBCOLL_RANK/IBCOLL_SIZE/IBCOLL_STORE, or unset PMI_RANK and PMI_SIZE,
// there. Where srun itself is the PMI launcher (--mpi=pmi2), PMI_RANK and
// PMI_SIZE equal SLURM_PROCID and SLURM_NTASKS and MPI_LOCALRANKID is unset:
// the local rank is then SLURM_LOCALID. SLURM_NTASKS_PER_NODE gives no local
// size: it describes the allocation, not the step (srun -n ignores it).
//
// IBCOLL_STORE, when set, is the address whatever the launcher. A host
// from a launcher variable takes the port IBCOLL_STORE_PORT, else
// MASTER_PORT, else DefaultPort (29500). Under torchrun with its agent
// store (TORCHELASTIC_USE_AGENT_STORE=True), torch's own store already
// listens on MASTER_PORT, so the default becomes MASTER_PORT+1.
//
// Slurm's launch node is where srun ran: it hosts rank 0 under sbatch, but
// not when srun runs on a login node; set MASTER_ADDR or IBCOLL_STORE
// then, or serve the store there (IBCOLL_STORE_EXTERNAL=1).
//
// ok is false, with no error, when no launcher variable is set. An error
// (*EnvError) names the variable at fault when a launcher is present but
// its variables are missing, malformed or inconsistent. Where only the local
// rank or size is at fault, env still holds the rank, size and store (its
// LocalRank and LocalSize -1), so that the process can meet the others to tell
// them why it stops; otherwise env.Store is empty.
func Detect(getenv func(string) string) (Env, bool, error) {
	if getenv == nil {
		return Env{}, false, fmt.Errorf("bootstrap: Detect: %w: getenv is nil", ErrInvalid)
	}
	l := present(getenv)
	if l == nil {
		return Env{}, false, nil
	}
	env, err := l.read(getenv)
	return env, true, err
}

func (l *launcher) fail(v, val, format string, args ...any) error {
	return &EnvError{Source: l.source, Var: v, Value: val, Reason: fmt.Sprintf(format, args...)}
}

// int reads a non-negative integer variable; set says whether it was set.
func (l *launcher) int(getenv func(string) string, v string, required bool) (n int, set bool, err error) {
	s := getenv(v)
	if s == "" {
		if required {
			return 0, false, l.fail(v, s, "not set")
		}
		return -1, false, nil
	}
	n, err = strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, true, l.fail(v, s, "not a non-negative integer")
	}
	return n, true, nil
}

func (l *launcher) read(getenv func(string) string) (Env, error) {
	env := Env{Source: l.source, LocalRank: -1, LocalSize: -1}
	var err error
	if env.Rank, _, err = l.int(getenv, l.rankVar, true); err != nil {
		return env, err
	}
	if env.Size, _, err = l.int(getenv, l.sizeVar, true); err != nil {
		return env, err
	}
	if env.Size < 1 {
		return env, l.fail(l.sizeVar, getenv(l.sizeVar), "size must be at least 1")
	}
	if env.Rank >= env.Size {
		return env, l.fail(l.rankVar, getenv(l.rankVar), "rank must be below %s=%d", l.sizeVar, env.Size)
	}
	store, err := l.store(getenv)
	if err != nil {
		return env, err
	}
	if s := getenv(ExternalEnv); s != "" {
		if env.External, err = strconv.ParseBool(s); err != nil {
			return env, l.fail(ExternalEnv, s, "not a boolean")
		}
	}
	env.Store, env.Token = store, getenv(TokenEnv)
	// Last: a process whose place on its node is wrong still has one in the job,
	// from which it can tell the others why it stops (Detect's doc).
	if err := l.readLocal(getenv, &env); err != nil {
		env.LocalRank, env.LocalSize = -1, -1
		return env, err
	}
	return env, nil
}

// readLocal reads the local rank and size into env.
func (l *launcher) readLocal(getenv func(string) string, env *Env) error {
	var err error
	if env.LocalRank, _, err = l.int(getenv, l.localRank, false); err != nil {
		return err
	}
	if env.LocalRank < 0 && l.source == SourcePMI && l.srunIsPMI(getenv) {
		if env.LocalRank, _, err = l.int(getenv, "SLURM_LOCALID", false); err != nil {
			return err
		}
	}
	if l.localSize != "" {
		if env.LocalSize, _, err = l.int(getenv, l.localSize, false); err != nil {
			return err
		}
	}
	if env.LocalSize == 0 || env.LocalSize > env.Size {
		return l.fail(l.localSize, getenv(l.localSize), "local size must be 1 to %s=%d", l.sizeVar, env.Size)
	}
	if env.LocalSize > 0 && env.LocalRank >= env.LocalSize {
		return l.fail(l.localRank, getenv(l.localRank), "local rank must be below %s=%d", l.localSize, env.LocalSize)
	}
	return nil
}

// srunIsPMI says whether srun is the PMI launcher (srun --mpi=pmi2): its
// PMI rank and size are Slurm's.
func (l *launcher) srunIsPMI(getenv func(string) string) bool {
	same := func(a, b string) bool {
		x, y := strings.TrimSpace(getenv(a)), strings.TrimSpace(getenv(b))
		return x != "" && x == y
	}
	return same("PMI_RANK", "SLURM_PROCID") && same("PMI_SIZE", "SLURM_NTASKS")
}

func (l *launcher) store(getenv func(string) string) (string, error) {
	if s := getenv(StoreEnv); s != "" {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return "", l.fail(StoreEnv, s, "not host:port: %v", err)
		}
		if host == "" {
			return "", l.fail(StoreEnv, s, "no host")
		}
		if strings.ContainsAny(host, " /") {
			return "", l.fail(StoreEnv, s, "%q is not a host name or address", host)
		}
		if _, err := parsePort(port); err != nil {
			return "", l.fail(StoreEnv, s, "%v", err)
		}
		return s, nil
	}
	if l.storeOnly {
		return "", l.fail(StoreEnv, "", "not set (with %s)", l.rankVar)
	}
	for _, v := range l.hostVars {
		host := strings.TrimSpace(getenv(v))
		if host == "" {
			continue
		}
		if strings.ContainsAny(host, " /") {
			return "", l.fail(v, host, "not a host name or address")
		}
		if _, port, err := net.SplitHostPort(host); err == nil {
			// An IPv6 address without brackets does not split; "h:29500" and
			// "[::1]:29500" do.
			return "", l.fail(v, host, "a host with a port (%s); give the port in %s or MASTER_PORT", port, StorePortEnv)
		}
		port, err := l.port(getenv)
		if err != nil {
			return "", err
		}
		return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port)), nil
	}
	return "", l.fail(l.hostVars[len(l.hostVars)-1], "", "not set: no store address (set %s, or %s)", StoreEnv, strings.Join(l.hostVars, " or "))
}

func (l *launcher) port(getenv func(string) string) (int, error) {
	if s := getenv(StorePortEnv); s != "" {
		p, err := parsePort(s)
		if err != nil {
			return 0, l.fail(StorePortEnv, s, "%v", err)
		}
		return p, nil
	}
	if s := getenv("MASTER_PORT"); s != "" {
		p, err := parsePort(s)
		if err != nil {
			return 0, l.fail("MASTER_PORT", s, "%v", err)
		}
		agent := false
		if a := getenv("TORCHELASTIC_USE_AGENT_STORE"); a != "" {
			var err error
			if agent, err = strconv.ParseBool(strings.TrimSpace(a)); err != nil {
				return 0, l.fail("TORCHELASTIC_USE_AGENT_STORE", a, "not a boolean")
			}
		}
		if agent {
			if p == 65535 {
				return 0, l.fail("MASTER_PORT", s, "torch's agent store holds it and no port follows; set %s", StorePortEnv)
			}
			p++
		}
		return p, nil
	}
	return DefaultPort, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %q is not 1 to 65535", s)
	}
	return p, nil
}
