// Command ibcoll-pingpong lists RDMA devices and measures RDMA write
// latency and bandwidth between two queue pairs in one process, on soft0
// or a real device (two devices, such as rxe0 and rxe1, put a wire between
// the QPs). It is a quick check that a device works end to end through
// ibcoll's verbs layer.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("ibcoll-pingpong", flag.ContinueOnError)
	list := fs.Bool("list", false, "list devices first")
	dev := fs.String("d", "", "device (default: $IBCOLL_DEVICE, else the first active real device, else soft0)")
	dev2 := fs.String("d2", "", "device of the second QP (default: the same as -d)")
	sizeList := fs.String("s", "8,4K,64K,1M,16M", "message sizes, comma separated, K/M suffixes")
	iters := fs.Int("n", 0, "iterations per size (default: by size)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dev == "" {
		*dev = os.Getenv(verbs.DeviceEnv)
	}
	sizes, err := parseSizes(*sizeList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ibcoll-pingpong: -s:", err)
		return 2
	}
	if *iters < 0 {
		fmt.Fprintln(os.Stderr, "ibcoll-pingpong: -n must be >= 0")
		return 2
	}
	if *list {
		if err := listDevices(); err != nil {
			fmt.Fprintln(os.Stderr, "ibcoll-pingpong:", err)
			return 1
		}
	}
	if *dev2 == "" {
		*dev2 = *dev
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := pingpong(ctx, *dev, *dev2, sizes, *iters); err != nil {
		fmt.Fprintln(os.Stderr, "ibcoll-pingpong:", err)
		return 1
	}
	return 0
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
		if err != nil || n <= 0 || n*mult > 1<<30 {
			return nil, fmt.Errorf("bad size %q (want 1 .. 1G, with optional K or M)", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

func listDevices() error {
	devs, err := verbs.Devices()
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
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
	mem []byte
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
	if s.buf, err = mem.Alloc(mem.Host, size); err != nil {
		return s, err
	}
	s.mem = s.buf.Bytes()[:size]
	for i := range s.mem {
		s.mem[i] = byte(i*31 + 7)
	}
	s.mr, err = s.pd.RegMRAddr(uintptr(unsafe.Pointer(&s.mem[0])), size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	return s, err
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

func pingpong(ctx context.Context, devA, devB string, sizes []int, iters int) error {
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
	fmt.Printf("RDMA write ping-pong: %s (%s) <-> %s (%s)\n", a.ctx.Name(), a.ctx.Provider(), b.ctx.Name(), b.ctx.Provider())
	fmt.Printf("%12s %8s %12s %16s\n", "bytes", "iters", "latency µs", "bandwidth MB/s")
	for _, size := range sizes {
		n := iters
		if n == 0 {
			n = max(10, min(2000, (256<<20)/size))
		}
		lat, err := latency(ctx, a, b, size, n)
		if err != nil {
			return fmt.Errorf("latency at %d bytes: %w", size, err)
		}
		bw, err := bandwidth(ctx, a, b, size, n)
		if err != nil {
			return fmt.Errorf("bandwidth at %d bytes: %w", size, err)
		}
		fmt.Printf("%12d %8d %12.2f %16.1f\n", size, n, lat.Seconds()*1e6, bw/1e6)
	}
	return nil
}

// latency bounces a write-with-immediate between the QPs; half the round
// trip is the one-way latency, as ib_write_lat reports it.
func latency(ctx context.Context, a, b *side, size, n int) (time.Duration, error) {
	write := func(from, to *side) verbs.SendWR {
		return verbs.SendWR{Op: verbs.OpRDMAWriteWithImm, SGE: []verbs.SGE{{Addr: from.mr.Addr(), Length: uint32(size), LKey: from.mr.LKey()}},
			RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey(), Signaled: true}
	}
	wa, wb := []verbs.SendWR{write(a, b)}, []verbs.SendWR{write(b, a)}
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
	wrs := []verbs.SendWR{{Op: verbs.OpRDMAWrite, SGE: []verbs.SGE{{Addr: a.mr.Addr(), Length: uint32(size), LKey: a.mr.LKey()}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Signaled: true}}
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
	return float64(size) * float64(n) / time.Since(start).Seconds(), nil
}
