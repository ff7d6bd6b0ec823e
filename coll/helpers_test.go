package coll_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/mem"
	_ "github.com/ibcoll/ibcoll/tlmlx5"
	"github.com/ibcoll/ibcoll/verbs"
)

func TestMain(m *testing.M) {
	testutil.LeakCheck(m, verbs.CheckLeaks, func() error {
		if n := mem.Live(); n != 0 {
			return fmt.Errorf("%d mem buffers still open", n)
		}
		return nil
	})
}

// device is the device of provider-generic tests: $IBCOLL_DEVICE (rxe0 in the VM),
// else soft0.
func device() string {
	if d := os.Getenv(verbs.DeviceEnv); d != "" {
		return d
	}
	return verbs.SoftDeviceName
}

// rank is one goroutine rank of a test team.
type rank struct {
	r    int
	ctx  *coll.Context
	team *coll.Team
}

// world is n goroutine ranks with a team over LocalOOB.
type world struct {
	t      testing.TB
	n      int
	ranks  []*rank
	closed bool
}

// newWorld makes n ranks, each with its own Context (as processes would), and a team.
// cfg is applied to every rank.
func newWorld(t testing.TB, n int, cfg coll.Config) *world {
	t.Helper()
	return newWorldOOB(t, cfg, coll.LocalOOB(n))
}

// newWorldOOB is newWorld over the OOBs given, one per rank.
func newWorldOOB(t testing.TB, cfg coll.Config, oobs []coll.OOB) *world {
	t.Helper()
	if cfg.Device == "" {
		cfg.Device = device()
	}
	n := len(oobs)
	w := &world{t: t, n: n, ranks: make([]*rank, n)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := coll.NewContext(cfg)
			if err != nil {
				errs[i] = err
				return
			}
			tm, err := c.NewTeam(ctx, oobs[i])
			if err != nil {
				errs[i] = err
				_ = c.Close()
				return
			}
			w.ranks[i] = &rank{r: i, ctx: c, team: tm}
		}(i)
	}
	wg.Wait()
	t.Cleanup(w.close)
	for i, err := range errs {
		require.NoError(t, err, "rank %d NewTeam", i)
	}
	return w
}

// close closes every rank's team and context; it may be called early, and again.
func (w *world) close() {
	if w.closed {
		return
	}
	w.closed = true
	for _, r := range w.ranks {
		if r == nil {
			continue
		}
		// assert, not require: one rank's failure must not leave the others open for
		// the next tests (TestMain's leak check, global counts).
		assert.NoError(w.t, r.team.Close(), "rank %d team close", r.r)
		assert.NoError(w.t, r.ctx.Close(), "rank %d context close", r.r)
	}
}

// run runs f on every rank concurrently and returns each rank's error.
func (w *world) run(f func(r *rank) error) []error {
	errs := make([]error, w.n)
	var wg sync.WaitGroup
	for i := range w.ranks {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = f(w.ranks[i])
		}(i)
	}
	wg.Wait()
	return errs
}

func (w *world) mustRun(f func(r *rank) error) {
	w.t.Helper()
	for i, err := range w.run(f) {
		require.NoError(w.t, err, "rank %d", i)
	}
}

// runColl initializes, posts, waits and closes one collective.
func runColl(ctx context.Context, tm *coll.Team, a coll.Args) error {
	req, err := tm.Init(a)
	if err != nil {
		return err
	}
	return postWaitClose(ctx, req)
}

// runInto is runColl through InitInto into q.
func runInto(ctx context.Context, tm *coll.Team, q *coll.Request, a coll.Args) error {
	if err := tm.InitInto(q, a); err != nil {
		return err
	}
	return postWaitClose(ctx, q)
}

// postWaitClose posts req, waits for it and closes it, and returns the first error of
// Wait, Post and Close, in that order.
func postWaitClose(ctx context.Context, req *coll.Request) error {
	perr := req.Post()
	werr := req.Wait(ctx)
	cerr := req.Close()
	if werr != nil {
		return werr
	}
	if perr != nil {
		return perr
	}
	return cerr
}

// goroutines waits for the goroutine count to settle back to at most base.
func settleGoroutines(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines left, %d before:\n%s", n, base, buf)
	}
}

// lateRank1 runs first on rank 0, with a ctx that ends after deadline, and late on
// rank 1 once first returned and another after passed: rank 1's program computes
// until rank 0 gave up, and some more. It returns both errors and how long first took.
func lateRank1(w *world, deadline, after time.Duration, first func(context.Context) error, late func() error) ([2]error, time.Duration) {
	var errs [2]error
	var took time.Duration
	gaveUp := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(gaveUp)
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		errs[0] = first(ctx)
		took = time.Since(start)
	}()
	go func() {
		defer wg.Done()
		<-gaveUp
		time.Sleep(after)
		errs[1] = late()
	}()
	wg.Wait()
	return errs, took
}

// closeReqs closes every request of reqs, ignoring errors (nil, closed already, or in
// flight): deferred by a test, it keeps a failed check from leaving the team busy, and
// so open, for the tests after it.
func closeReqs(reqs []*coll.Request) {
	for _, q := range reqs {
		_ = q.Close()
	}
}

// readMem returns n bytes read from addr, of memory type typ.
func readMem(t testing.TB, addr uintptr, typ mem.Type, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	if n > 0 {
		// The address is converted in the call: CopyPtr keeps out in place (a slice on
		// the stack once moved under a one-byte read here, before it did).
		require.NoError(t, mem.CopyPtr(uintptr(unsafe.Pointer(&out[0])), mem.Host, addr, typ, n))
	}
	return out
}

// writeMem copies p to addr, of memory type typ.
func writeMem(t testing.TB, addr uintptr, typ mem.Type, p []byte) {
	t.Helper()
	if len(p) > 0 {
		require.NoError(t, mem.CopyPtr(addr, typ, uintptr(unsafe.Pointer(&p[0])), mem.Host, len(p)))
	}
}
