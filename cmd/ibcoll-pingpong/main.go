// Command ibcoll-pingpong lists RDMA devices and measures RDMA write
// latency and bandwidth between two queue pairs in one process, on soft0
// or a real device (two devices, such as rxe0 and rxe1, put a wire between
// the QPs). It is a quick check that a device works end to end through
// ibcoll's verbs layer: each side's buffer holds its own random bytes (the seed is
// printed, -seed replays it), and after the writes of every size the receiver's bytes
// are compared with the sender's, so a device that completes writes without moving
// their data fails the run.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unsafe"

	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/verbs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command with its arguments and output streams; it returns the exit
// status: 0 done and checked, 1 a failure (of the device, or of the data check), 2
// bad arguments.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ibcoll-pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.Bool("list", false, "list devices first")
	dev := fs.String("d", "", "device (default: $IBCOLL_DEVICE, else the first active real device, else soft0)")
	dev2 := fs.String("d2", "", "device of the second QP (default: the same as -d)")
	sizeList := fs.String("s", "8,4K,64K,1M,16M", "message sizes, comma separated, K/M suffixes, up to 1G (each side registers twice the largest: where its writes land, and what it writes)")
	iters := fs.Int("n", 0, "iterations per size (default: by size)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	seed := fs.Uint64("seed", 0, "seed of the random data (default: from the clock; the header prints it)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ibcoll-pingpong: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *dev == "" {
		*dev = os.Getenv(verbs.DeviceEnv)
	}
	sizes, err := parseSizes(*sizeList)
	if err != nil {
		fmt.Fprintln(stderr, "ibcoll-pingpong: -s:", err)
		return 2
	}
	if *iters < 0 {
		fmt.Fprintln(stderr, "ibcoll-pingpong: -n must be >= 0")
		return 2
	}
	if *timeout <= 0 {
		fmt.Fprintln(stderr, "ibcoll-pingpong: -timeout must be > 0")
		return 2
	}
	if !seedSet(fs) {
		*seed = uint64(time.Now().UnixNano())
	}
	if *list {
		if err := listDevices(stdout); err != nil {
			fmt.Fprintln(stderr, "ibcoll-pingpong:", err)
			return 1
		}
	}
	if *dev2 == "" {
		*dev2 = *dev
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := pingpong(ctx, stdout, *dev, *dev2, sizes, *iters, *seed); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (gave up after -timeout %v)", err, *timeout)
		}
		fmt.Fprintln(stderr, "ibcoll-pingpong:", err)
		return 1
	}
	return 0
}

// seedSet reports whether -seed was given, so that -seed 0 replays seed 0.
func seedSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "seed" })
	return set
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "K"):
			mult, f = 1<<10, strings.TrimSuffix(f, "K")
		case strings.HasSuffix(f, "M"):
			mult, f = 1<<20, strings.TrimSuffix(f, "M")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n > (1<<30)/mult {
			return nil, fmt.Errorf("bad size %q (want 1 .. 1G, with optional K or M)", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

func listDevices(out io.Writer) error {
	devs, err := verbs.Devices()
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "DEVICE\tPROVIDER\tNODE GUID\tPORT\tSTATE\tLINK\tLID\tGIDS\tNETDEV\tPCI\tNUMA")
	for _, d := range devs {
		for _, p := range d.Ports {
			var gids []string
			for _, g := range p.GIDs {
				gids = append(gids, fmt.Sprintf("%d:%s(%s)", g.Index, g.GID, g.Type))
			}
			fmt.Fprintf(w, "%s\t%s\t%016x\t%d\t%v\t%v\t%d\t%s\t%s\t%s\t%d\n", d.Name, d.Provider, d.NodeGUID, p.Num, p.State,
				p.LinkLayer, p.LID, strings.Join(gids, " "), dash(d.Netdev), dash(d.PCIAddr), d.NUMANode)
		}
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type side struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	buf *mem.Buffer // host memory kept out of forked children, as every registered buffer
	mem []byte      // the peer's writes land in the first half; this side writes from the second
	max int         // the half's size, in whole pages, so that both halves start on a page
	mr  *verbs.MR
	wcs []verbs.WC
}

// closeAll releases in reverse order of creation, joining errors.
func (s *side) closeAll() error {
	err := errors.Join(s.qp.Close(), s.mr.Close(), s.cq.Close(), s.pd.Close(), s.ctx.Close())
	if s.buf != nil {
		err = errors.Join(err, s.buf.Close())
	}
	return err
}

func newSide(dev string, size int) (*side, error) {
	s := &side{wcs: make([]verbs.WC, 16)}
	var err error
	if s.ctx, err = verbs.Open(dev); err != nil {
		return s, err
	}
	if s.pd, err = s.ctx.AllocPD(); err != nil {
		return s, err
	}
	if s.cq, err = s.ctx.CreateCQ(256); err != nil {
		return s, err
	}
	if s.qp, err = s.pd.CreateQP(verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 64, MaxRecvWR: 64, MaxSGE: 1}); err != nil {
		return s, err
	}
	page := os.Getpagesize()
	half := (size + page - 1) / page * page
	if s.buf, err = mem.Alloc(mem.Host, 2*half); err != nil {
		return s, err
	}
	s.mem, s.max = s.buf.Bytes()[:2*half], half
	s.mr, err = s.pd.RegMRAddr(uintptr(unsafe.Pointer(&s.mem[0])), 2*half, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	return s, err
}

// in is where the peer's writes of size bytes land.
func (s *side) in(size int) []byte { return s.mem[:size] }

// out is what this side writes to the peer.
func (s *side) out(size int) []byte { return s.mem[s.max : s.max+size] }

// write is an RDMA write of size bytes from s's out into to's in.
func (s *side) write(op verbs.Opcode, to *side, size int) verbs.SendWR {
	return verbs.SendWR{Op: op, SGE: []verbs.SGE{{Addr: s.mr.Addr() + uint64(s.max), Length: uint32(size), LKey: s.mr.LKey()}},
		RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey(), Signaled: true}
}

// waitOne polls until one completion arrives and checks its status.
func (s *side) waitOne(ctx context.Context) (verbs.WC, error) {
	for {
		n, err := s.cq.Poll(s.wcs[:1])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 1 {
			return s.wcs[0], s.wcs[0].Err()
		}
		if err := s.cq.Wait(ctx); err != nil {
			return verbs.WC{}, err
		}
	}
}

func pingpong(ctx context.Context, out io.Writer, devA, devB string, sizes []int, iters int, seed uint64) error {
	maxSize := 0
	for _, s := range sizes {
		maxSize = max(maxSize, s)
	}
	a, err := newSide(devA, maxSize)
	defer func() { _ = a.closeAll() }()
	if err != nil {
		return err
	}
	b, err := newSide(devB, maxSize)
	defer func() { _ = b.closeAll() }()
	if err != nil {
		return err
	}
	if err := a.qp.Connect(b.qp.Info()); err != nil {
		return err
	}
	if err := b.qp.Connect(a.qp.Info()); err != nil {
		return err
	}
	fmt.Fprintf(out, "RDMA write ping-pong: %s (%s) <-> %s (%s), data seed %d\n", a.ctx.Name(), a.ctx.Provider(), b.ctx.Name(), b.ctx.Provider(), seed)
	fmt.Fprintf(out, "%12s %8s %12s %16s %6s\n", "bytes", "iters", "latency µs", "bandwidth MB/s", "check")
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for _, size := range sizes {
		n := iters
		if n == 0 {
			n = max(10, min(2000, (256<<20)/size))
		}
		// Fresh bytes everywhere, so that each direction's writes are seen to land.
		for _, p := range [][]byte{a.in(size), a.out(size), b.in(size), b.out(size)} {
			fill(rnd, p)
		}
		beforeWrites(a, b, size)
		lat, err := latency(ctx, a, b, size, n)
		if err != nil {
			return fmt.Errorf("latency at %d bytes: %w", size, err)
		}
		afterWrites(a, b, size)
		if err := check("latency", "the second side", b.in(size), a.out(size)); err != nil {
			return err
		}
		if err := check("latency", "the first side", a.in(size), b.out(size)); err != nil {
			return err
		}
		fill(rnd, b.in(size))
		beforeWrites(a, b, size)
		bw, err := bandwidth(ctx, a, b, size, n)
		if err != nil {
			return fmt.Errorf("bandwidth at %d bytes: %w", size, err)
		}
		afterWrites(a, b, size)
		if err := check("bandwidth", "the second side", b.in(size), a.out(size)); err != nil {
			return err
		}
		fmt.Fprintf(out, "%12d %8d %12.2f %16.1f %6s\n", size, n, lat.Seconds()*1e6, bw/1e6, "ok")
	}
	return nil
}

// beforeWrites and afterWrites are variables only so that tests can corrupt what
// landed, or undo it, and see the check fail; beforeWrites runs once the buffers hold
// the run's fresh bytes.
var (
	beforeWrites = func(a, b *side, size int) {}
	afterWrites  = func(a, b *side, size int) {}
)

// fill puts random bytes from r into p.
func fill(r *rand.Rand, p []byte) {
	for i := range p {
		if i%8 == 0 {
			v := r.Uint64()
			for k := 0; k < 8 && i+k < len(p); k++ {
				p[i+k] = byte(v >> (8 * k))
			}
		}
	}
}

// check compares the bytes a side holds after a run's writes with the bytes its peer
// wrote.
func check(run, where string, got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("data check failed after the %s run of %d bytes: %s holds %#02x at byte %d where %#02x was written",
				run, len(want), where, got[i], i, want[i])
		}
	}
	return nil
}

// latency bounces a write-with-immediate between the QPs; half the round
// trip is the one-way latency, as ib_write_lat reports it.
func latency(ctx context.Context, a, b *side, size, n int) (time.Duration, error) {
	wa, wb := []verbs.SendWR{a.write(verbs.OpRDMAWriteWithImm, b, size)}, []verbs.SendWR{b.write(verbs.OpRDMAWriteWithImm, a, size)}
	recv := []verbs.RecvWR{{}}
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := b.qp.PostRecv(recv...); err != nil {
			return 0, err
		}
		if err := a.qp.PostRecv(recv...); err != nil {
			return 0, err
		}
		if err := a.qp.PostSend(wa...); err != nil {
			return 0, err
		}
		for k := 0; k < 2; k++ { // a's send completion and b's receive
			if _, err := waitAny(ctx, a, b); err != nil {
				return 0, err
			}
		}
		if err := b.qp.PostSend(wb...); err != nil {
			return 0, err
		}
		for k := 0; k < 2; k++ {
			if _, err := waitAny(ctx, a, b); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start) / time.Duration(2*n), nil
}

// waitAny takes one completion from either side's CQ.
func waitAny(ctx context.Context, a, b *side) (verbs.WC, error) {
	for {
		for _, s := range []*side{a, b} {
			n, err := s.cq.Poll(s.wcs[:1])
			if err != nil {
				return verbs.WC{}, err
			}
			if n == 1 {
				return s.wcs[0], s.wcs[0].Err()
			}
		}
		if err := ctx.Err(); err != nil {
			return verbs.WC{}, err
		}
	}
}

// bandwidth streams writes with a window of outstanding requests, as
// ib_write_bw does.
func bandwidth(ctx context.Context, a, b *side, size, n int) (float64, error) {
	const window = 16
	wrs := []verbs.SendWR{a.write(verbs.OpRDMAWrite, b, size)}
	start := time.Now()
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < window {
			if err := a.qp.PostSend(wrs...); err != nil {
				return 0, err
			}
			posted++
		}
		if _, err := a.waitOne(ctx); err != nil {
			return 0, err
		}
		done++
	}
	took := time.Since(start)
	// Untimed: a write with immediate after the others, whose receive completion on
	// the second side means that their data is there for its CPU to read (RC delivers
	// in order); the sender's completions alone need not mean that on every NIC.
	if err := b.qp.PostRecv(verbs.RecvWR{}); err != nil {
		return 0, err
	}
	fence := a.write(verbs.OpRDMAWriteWithImm, b, 0)
	fence.SGE = nil
	if err := a.qp.PostSend(fence); err != nil {
		return 0, err
	}
	for k := 0; k < 2; k++ { // a's send completion and b's receive
		if _, err := waitAny(ctx, a, b); err != nil {
			return 0, err
		}
	}
	return float64(size) * float64(n) / took.Seconds(), nil
}
