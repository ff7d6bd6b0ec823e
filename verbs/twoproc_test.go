package verbs_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

// The two-process test: the test binary re-executes itself as a second
// process; the two exchange QP info through files, RDMA-write random data
// to each other and check it. soft0 cannot do this (it is in-process
// only), so it needs a real device: rxe in the VM.

const (
	childEnv     = "IBCOLL_TEST_CHILD_DIR"
	childDevEnv  = "IBCOLL_TEST_CHILD_DEV"
	childSeedEnv = "IBCOLL_TEST_CHILD_SEED"
	xferSize     = 1<<20 + 13
)

type peerEnd struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mem []byte
	mr  *verbs.MR
}

func (p *peerEnd) close() error {
	var first error
	for _, c := range []interface{ Close() error }{p.qp, p.mr, p.cq, p.pd, p.ctx} {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	if p.mem != nil {
		_ = unix.Munmap(p.mem)
	}
	return first
}

func newPeerEnd(dev string) (*peerEnd, error) {
	p := &peerEnd{}
	var err error
	if p.ctx, err = verbs.Open(dev); err != nil {
		return p, err
	}
	if p.pd, err = p.ctx.AllocPD(); err != nil {
		return p, err
	}
	if p.cq, err = p.ctx.CreateCQ(16); err != nil {
		return p, err
	}
	if p.qp, err = p.pd.CreateQP(verbs.QPConfig{SendCQ: p.cq, RecvCQ: p.cq, MaxSendWR: 4, MaxRecvWR: 4, MaxSGE: 1}); err != nil {
		return p, err
	}
	// Two halves: [0,n) is what this side sends, [n,2n) what it receives.
	if p.mem, err = unix.Mmap(-1, 0, 2*xferSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return p, err
	}
	p.mr, err = p.pd.RegMRAddr(uintptr(unsafe.Pointer(&p.mem[0])), len(p.mem), rw)
	return p, err
}

func publish(dir, name string, p *peerEnd) error {
	info, err := p.qp.Info().MarshalBinary()
	if err != nil {
		return err
	}
	b := binary.LittleEndian.AppendUint64(info, p.mr.Addr())
	b = binary.LittleEndian.AppendUint32(b, p.mr.RKey())
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

func await(dir, name string) (verbs.QPInfo, uint64, uint32, error) {
	var qi verbs.QPInfo
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			if len(b) < 12 {
				return qi, 0, 0, fmt.Errorf("%s: %d bytes", name, len(b))
			}
			err = qi.UnmarshalBinary(b[:len(b)-12])
			return qi, binary.LittleEndian.Uint64(b[len(b)-12:]), binary.LittleEndian.Uint32(b[len(b)-4:]), err
		}
		if time.Now().After(deadline) {
			return qi, 0, 0, fmt.Errorf("peer never published %s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exchange runs one side: publish, connect, write own data into the peer's
// receive half with immediate, wait for both completions, check.
func exchange(dir, me, peer, dev string, seed uint64, peerSeed uint64) error {
	p, err := newPeerEnd(dev)
	defer func() { _ = p.close() }()
	if err != nil {
		return err
	}
	fillSeeded(p.mem[:xferSize], seed)
	if err := p.qp.PostRecv(verbs.RecvWR{ID: 2}); err != nil {
		return err
	}
	if err := publish(dir, me, p); err != nil {
		return err
	}
	qi, addr, rkey, err := await(dir, peer)
	if err != nil {
		return err
	}
	if err := p.qp.Connect(qi); err != nil {
		return err
	}
	// The peer may not have reached RTR yet; RC retries cover that window.
	if err := p.qp.PostSend(verbs.SendWR{ID: 1, Op: verbs.OpRDMAWriteWithImm, Imm: 0xC0FFEE, Signaled: true,
		SGE:        []verbs.SGE{{Addr: p.mr.Addr(), Length: xferSize, LKey: p.mr.LKey()}},
		RemoteAddr: addr + xferSize, RKey: rkey}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 2)
	for got := 0; got < 2; {
		n, err := p.cq.Poll(wcs[got:])
		if err != nil {
			return err
		}
		for _, wc := range wcs[got : got+n] {
			if err := wc.Err(); err != nil {
				return err
			}
		}
		got += n
		if got < 2 {
			if err := p.cq.Wait(ctx); err != nil {
				return fmt.Errorf("waiting for completions: %w", err)
			}
		}
	}
	want := make([]byte, xferSize)
	fillSeeded(want, peerSeed)
	if i := testutil.FirstDiff(want, p.mem[xferSize:]); i >= 0 {
		return fmt.Errorf("%s: received data differs at offset %d: want %#x got %#x", me, i, want[i], p.mem[xferSize+i])
	}
	// Tell the peer we are done before tearing down, so its QP does not
	// see ours vanish while its write is in flight.
	if err := os.WriteFile(filepath.Join(dir, me+".done"), nil, 0o600); err != nil {
		return err
	}
	_, _, _, _ = await(dir, peer+".done")
	return nil
}

func fillSeeded(b []byte, seed uint64) {
	testutil.Fill(rand.New(rand.NewPCG(seed, ^seed)), b)
}

func runChild() int {
	seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
	if err := exchange(os.Getenv(childEnv), "child", "parent", os.Getenv(childDevEnv), seed+1, seed); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	if err := verbs.CheckLeaks(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func TestTwoProcessRDMAWrite(t *testing.T) {
	var p provider
	for _, q := range providers(t) {
		if q.name == "ibv" {
			p = q
		}
	}
	testutil.RequireRDMA(t, p.rdmaOK, "cross-process RDMA needs a libibverbs device (soft0 is in-process only)")
	t.Logf("provider ibv: parent on %s, child on %s", p.devA, p.devB)
	seed := testutil.Rand(t).Uint64() >> 1
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir, childDevEnv+"="+p.devB, childSeedEnv+"="+strconv.FormatUint(seed, 10))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	require.NoError(t, cmd.Start())
	err := exchange(dir, "parent", "child", p.devA, seed, seed+1)
	if err != nil {
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	require.NoError(t, err, "parent")
	require.NoError(t, werr, "child process")
}
