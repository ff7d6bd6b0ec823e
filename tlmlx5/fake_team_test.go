package tlmlx5

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

// A fake team: the transport driven without package coll. Every rank's endpoint lives
// in this process on soft0, the "OOB" is a slice of addresses, and one goroutine (the
// test's) drives every endpoint in turn, as coll does under its team lock.

const (
	// maxPollRounds bounds a wait: a round polls every endpoint once. A hang is a
	// failure, not a stuck test binary.
	maxPollRounds = 2_000_000
	// pollTimeout bounds a wait in wall time as well (the race detector is slow, but
	// not this slow).
	pollTimeout = 20 * time.Second
)

// fakeTeam is n endpoints of one team, wired to each other.
type fakeTeam struct {
	n    int
	ctx  driver.Context
	eps  []driver.Endpoint
	next []uint64 // per rank: what NextSeq answers
	seq  uint64   // the last sequence number handed out by newSeq
	hs   []*ctlRecorder
	// msgs is the team's message channel (lazy teams): poll delivers what the
	// endpoints sent, in order. nil: a full mesh.
	msgs *fakeMessages
}

// fakeMessages is the Messenger of a fake team's endpoints: one queue, delivered
// by poll under the test's one goroutine, as coll delivers its mailbox's under the
// team lock. drop, when set, loses the messages it matches (a peer that never
// answers).
type fakeMessages struct {
	q    []fakeMsg
	sent int
	drop func(from, to int, msg []byte) bool
	// hold, when set, keeps back the messages it matches in held until the test
	// puts them back in q (a slow mailbox).
	hold  func(from, to int, msg []byte) bool
	held  []fakeMsg
	close map[int]bool // ranks whose mailbox refuses messages
	left  []string     // what the endpoints passed on with Messenger.Left: "to<-peer: why"
}

type fakeMsg struct {
	from, to int
	msg      []byte
}

type fakeMessenger struct {
	m    *fakeMessages
	rank int
}

func (f fakeMessenger) Send(peer int, msg []byte) error {
	if f.m.close[peer] {
		return fmt.Errorf("rank %d's mailbox is closed: %w", peer, driver.ErrClosed)
	}
	f.m.sent++
	f.m.q = append(f.m.q, fakeMsg{from: f.rank, to: peer, msg: bytes.Clone(msg)})
	return nil
}

func (f fakeMessenger) Gone(peer int) error {
	if f.m.close[peer] {
		return fmt.Errorf("rank %d's mailbox is closed: %w", peer, driver.ErrClosed)
	}
	return nil
}

func (f fakeMessenger) Left(peer int, from uint64, why string) {
	f.m.left = append(f.m.left, fmt.Sprintf("%d<-%d from %d: %s", f.rank, peer, from, why))
}

// deliver hands every queued message to its endpoint.
func (ft *fakeTeam) deliver() {
	if ft.msgs == nil {
		return
	}
	for len(ft.msgs.q) > 0 {
		m := ft.msgs.q[0]
		ft.msgs.q = ft.msgs.q[1:]
		if ft.msgs.drop != nil && ft.msgs.drop(m.from, m.to, m.msg) {
			continue
		}
		if ft.msgs.hold != nil && ft.msgs.hold(m.from, m.to, m.msg) {
			ft.msgs.held = append(ft.msgs.held, m)
			continue
		}
		ft.eps[m.to].(driver.Lazy).Message(m.from, m.msg)
	}
}

// ctlRecorder is a rank's Handler: it keeps every control message, per sending peer,
// in arrival order.
type ctlRecorder struct {
	from [][][]byte
}

func (h *ctlRecorder) Control(peer int, msg []byte) {
	h.from[peer] = append(h.from[peer], bytes.Clone(msg))
}

// openSoft opens the transport on soft0, as coll would through driver.Lookup.
func openSoft(t testing.TB) driver.Context {
	t.Helper()
	return openSoftWith(t, driver.Config{})
}

// openSoftWith opens soft0 with cfg (its Device set to soft0).
func openSoftWith(t testing.TB, cfg driver.Config) driver.Context {
	t.Helper()
	cfg.Device = verbs.SoftDeviceName
	ctx, err := transport{}.Open(cfg)
	require.NoError(t, err)
	return ctx
}

// newFakeTeam makes and connects a team of n ranks; faults (may be nil) gives each
// rank's fault set. The team and its context are closed at the end of t.
func newFakeTeam(t testing.TB, n int, faults func(rank int) *fault.Set) *fakeTeam {
	t.Helper()
	return newFakeTeamMode(t, n, faults, true)
}

// newMeshTeam is a fake team without a Messenger: every pair connects at Connect.
func newMeshTeam(t testing.TB, n int, faults func(rank int) *fault.Set) *fakeTeam {
	t.Helper()
	return newFakeTeamMode(t, n, faults, false)
}

func newFakeTeamMode(t testing.TB, n int, faults func(rank int) *fault.Set, lazy bool) *fakeTeam {
	t.Helper()
	return newFakeTeamOn(t, openSoft(t), n, faults, lazy)
}

// newFakeTeamOn makes the fake team on ctx, which it closes at the end of t.
func newFakeTeamOn(t testing.TB, ctx driver.Context, n int, faults func(rank int) *fault.Set, lazy bool) *fakeTeam {
	t.Helper()
	ft := &fakeTeam{n: n, ctx: ctx, next: make([]uint64, n)}
	if lazy {
		ft.msgs = &fakeMessages{close: map[int]bool{}}
	}
	t.Cleanup(func() { ft.close(t) })
	addrs := make([][]byte, n)
	for r := 0; r < n; r++ {
		var fs *fault.Set
		if faults != nil {
			fs = faults(r)
		}
		p := driver.TeamParams{Rank: r, Size: n, Faults: fs, NextSeq: func() uint64 { return ft.next[r] }}
		if lazy {
			p.Messenger = fakeMessenger{m: ft.msgs, rank: r}
		}
		ep, addr, err := ft.ctx.NewEndpoint(p)
		require.NoError(t, err, "NewEndpoint rank %d", r)
		ft.eps = append(ft.eps, ep)
		ft.hs = append(ft.hs, &ctlRecorder{from: make([][][]byte, n)})
		addrs[r] = addr
	}
	for r, ep := range ft.eps {
		require.NoError(t, ep.Connect(addrs), "Connect rank %d", r)
	}
	return ft
}

// close closes the endpoints and the context; every task must be closed by then.
func (ft *fakeTeam) close(t testing.TB) {
	var errs []error
	for r, ep := range ft.eps {
		if err := ep.Close(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	ft.eps = nil
	if ft.ctx != nil {
		if err := ft.ctx.Close(); err != nil {
			errs = append(errs, err)
		}
		ft.ctx = nil
	}
	require.NoError(t, errors.Join(errs...), "closing the fake team")
}

// newSeq hands out the next sequence number of the team.
func (ft *fakeTeam) newSeq() uint64 {
	ft.seq++
	return ft.seq
}

// newTask is rank r's Init of spec: NextSeq moves past it first, as coll's does.
func (ft *fakeTeam) newTask(r int, spec *driver.TaskSpec) (driver.Task, error) {
	ft.next[r] = max(ft.next[r], spec.Seq+1)
	return ft.eps[r].NewTask(spec)
}

// poll polls every endpoint once, round-robin.
func (ft *fakeTeam) poll(t testing.TB) {
	ft.deliver()
	for r, ep := range ft.eps {
		if err := ep.Poll(ft.hs[r]); err != nil {
			t.Fatalf("Poll rank %d: %v", r, err)
		}
	}
}

// pollUntil polls until cond holds, within maxPollRounds rounds and limit; it reports
// whether cond held.
func (ft *fakeTeam) pollUntil(t testing.TB, limit time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(limit)
	for i := 0; i < maxPollRounds; i++ {
		if cond() {
			return true
		}
		ft.poll(t)
		runtime.Gosched()
		if i%256 == 255 && time.Now().After(deadline) {
			break
		}
	}
	return cond()
}

// states returns every task's State (nil tasks count as done).
func states(tasks []driver.Task) (done []bool, errs []error) {
	done, errs = make([]bool, len(tasks)), make([]error, len(tasks))
	for r, k := range tasks {
		if k == nil {
			done[r] = true
			continue
		}
		done[r], errs[r] = k.State()
	}
	return done, errs
}

func allSettled(tasks []driver.Task) bool {
	done, errs := states(tasks)
	for r := range tasks {
		if !done[r] && errs[r] == nil {
			return false
		}
	}
	return true
}

func anyFailed(tasks []driver.Task) bool {
	_, errs := states(tasks)
	for _, err := range errs {
		if err != nil {
			return true
		}
	}
	return false
}

// post posts every rank's task (post number post) and polls until every one is done
// or failed; it fails t on a hang, and returns each rank's error.
func (ft *fakeTeam) post(t testing.TB, tasks []driver.Task, post uint32) []error {
	t.Helper()
	for r, k := range tasks {
		if k != nil {
			require.NoError(t, k.Post(post), "Post(%d) rank %d", post, r)
		}
	}
	if !ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }) {
		t.Fatalf("post %d hangs: %s", post, waiting(tasks))
	}
	_, errs := states(tasks)
	return errs
}

// run posts and requires every rank to succeed.
func (ft *fakeTeam) run(t testing.TB, tasks []driver.Task, post uint32) {
	t.Helper()
	for r, err := range ft.post(t, tasks, post) {
		require.NoError(t, err, "post %d rank %d", post, r)
	}
}

func waiting(tasks []driver.Task) string {
	var b bytes.Buffer
	done, errs := states(tasks)
	for r, k := range tasks {
		if k != nil && !done[r] && errs[r] == nil {
			fmt.Fprintf(&b, "[rank %d waits for %s] ", r, k.Waiting())
		}
	}
	return b.String()
}

// quiesce aborts every task, polls until no work of any is outstanding, and closes
// them.
func (ft *fakeTeam) quiesce(t testing.TB, tasks []driver.Task) {
	t.Helper()
	for _, k := range tasks {
		if k != nil {
			k.Abort()
		}
	}
	if !ft.pollUntil(t, pollTimeout, func() bool {
		for _, k := range tasks {
			if k != nil && !k.Quiesced() {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("tasks do not quiesce after Abort: %s", waiting(tasks))
	}
	closeTasks(t, tasks)
}

func closeTasks(t testing.TB, tasks []driver.Task) {
	t.Helper()
	for r, k := range tasks {
		if k != nil {
			require.NoError(t, k.Close(), "task Close rank %d", r)
			tasks[r] = nil
		}
	}
}

// hostBuf is a user buffer with a guard after the part the collective may use: the
// transport sees Slice = b[:bytes] only.
type hostBuf struct {
	b     []byte // bytes + guard
	bytes int
}

const guardBytes = 24

func newHostBuf(bytes int) hostBuf { return hostBuf{b: make([]byte, bytes+guardBytes), bytes: bytes} }

// driverBuf describes one buffer to the transport as coll's driverBuf does for an
// unstaged host slice.
func (h hostBuf) driverBuf(l collective.BufLayout) driver.Buf {
	b := driver.Buf{Type: mem.Host, Bytes: h.bytes, Count: l.Count, Counts: l.Counts, Displs: l.Displs}
	if h.bytes > 0 {
		b.Slice = h.b[:h.bytes]
		b.Addr = uintptr(unsafe.Pointer(unsafe.SliceData(h.b)))
	}
	return b
}

// newTasks makes every rank's task of runs.
func (ft *fakeTeam) newTasks(t testing.TB, runs []*rankRun) []driver.Task {
	t.Helper()
	tasks := make([]driver.Task, len(runs))
	for r := range tasks {
		k, err := ft.newTask(r, &runs[r].spec)
		require.NoError(t, err, "NewTask rank %d", r)
		tasks[r] = k
	}
	return tasks
}

// finish polls the posted tasks until every one is done, requires them all to have
// succeeded, and checks the buffers against want.
func (ft *fakeTeam) finish(t testing.TB, tasks []driver.Task, post uint32, runs []*rankRun, want [][2][]byte) {
	t.Helper()
	if !ft.pollUntil(t, pollTimeout, func() bool { return allSettled(tasks) }) {
		t.Fatalf("post %d hangs: %s", post, waiting(tasks))
	}
	_, errs := states(tasks)
	require.NoError(t, errors.Join(errs...))
	check(t, fmt.Sprintf("post %d", post), runs, want)
}
