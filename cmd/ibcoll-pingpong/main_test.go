package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ibcoll/ibcoll/internal/testutil"
	"github.com/ibcoll/ibcoll/verbs"
)

func TestMain(m *testing.M) {
	testutil.LeakCheck(m, verbs.CheckLeaks)
}

// pingpongRun runs the command on soft0 and returns its status and output.
func pingpongRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRowsChecked(t *testing.T) {
	code, out, errs := pingpongRun(t, "-d", "soft0", "-s", "8,4K,64K", "-n", "20", "-seed", "7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "data seed 7") {
		t.Errorf("the header does not give the seed:\n%s", out)
	}
	var rows int
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 5 && (f[0] == "8" || f[0] == "4096" || f[0] == "65536") {
			rows++
			if f[1] != "20" || f[4] != "ok" {
				t.Errorf("row %q: want 20 iterations and ok", l)
			}
		}
	}
	if rows != 3 {
		t.Errorf("%d rows, want 3:\n%s", rows, out)
	}
}

// A device whose writes complete without their data landing must fail the run:
// each check is broken in turn.
func TestCorruptionFails(t *testing.T) {
	for _, c := range []struct {
		name  string
		call  int // which call of afterWrites corrupts: 1 after latency, 2 after bandwidth
		first bool
		want  string
	}{
		{"latency to the second side", 1, false, "after the latency run of 4096 bytes: the second side"},
		{"latency to the first side", 1, true, "after the latency run of 4096 bytes: the first side"},
		{"bandwidth", 2, false, "after the bandwidth run of 4096 bytes: the second side"},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			orig := afterWrites
			t.Cleanup(func() { afterWrites = orig })
			afterWrites = func(a, b *side, size int) {
				calls++
				if calls != c.call {
					return
				}
				p := b.in(size)
				if c.first {
					p = a.in(size)
				}
				p[size-1] ^= 0x5a
			}
			code, _, errs := pingpongRun(t, "-d", "soft0", "-s", "4K", "-n", "3")
			if calls < c.call {
				t.Fatalf("the corruption never ran (%d calls)", calls)
			}
			if code != 1 || !strings.Contains(errs, "data check failed "+c.want) || !strings.Contains(errs, "at byte 4095") {
				t.Fatalf("exit %d, stderr %q: want 1 and a failed check %s at byte 4095", code, errs, c.want)
			}
		})
	}
}

// A device whose writes complete and move nothing must fail the run: what each
// receiving half held before a run is put back after it. The check can only see that
// if every run starts from fresh bytes that differ from what will be written.
func TestWritesThatMoveNothingFail(t *testing.T) {
	for _, c := range []struct {
		name string
		call int // 1 the latency run, 2 the bandwidth run
		want string
	}{
		{"latency", 1, "after the latency run of 4096 bytes"},
		{"bandwidth", 2, "after the bandwidth run of 4096 bytes: the second side"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before, after := beforeWrites, afterWrites
			t.Cleanup(func() { beforeWrites, afterWrites = before, after })
			var calls, undone int
			var aIn, bIn []byte
			beforeWrites = func(a, b *side, size int) {
				calls++
				if calls == c.call {
					aIn, bIn = bytes.Clone(a.in(size)), bytes.Clone(b.in(size))
				}
			}
			afterWrites = func(a, b *side, size int) {
				if aIn != nil && undone == 0 && calls == c.call {
					undone++
					copy(a.in(size), aIn)
					copy(b.in(size), bIn)
				}
			}
			code, _, errs := pingpongRun(t, "-d", "soft0", "-s", "4K", "-n", "3")
			if undone != 1 {
				t.Fatalf("the writes were never undone (%d calls before writes)", calls)
			}
			if code != 1 || !strings.Contains(errs, "data check failed "+c.want) {
				t.Fatalf("exit %d, stderr %q: want 1 and a failed check %s", code, errs, c.want)
			}
		})
	}
}

// Sizes past the limit are refused, even those whose bytes overflow an int.
func TestHugeSizesRefused(t *testing.T) {
	for _, s := range []string{"1025M", "17592186044416M", "9223372036854775807K"} {
		code, _, errs := pingpongRun(t, "-d", "soft0", "-s", s)
		if code != 2 || !strings.Contains(errs, "-s: bad size") {
			t.Errorf("-s %s: exit %d, stderr %q", s, code, errs)
		}
	}
}

func TestBadArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-s", "0"}, 2, "-s: bad size"},
		{[]string{"-s", "4X"}, 2, "-s: bad size"},
		{[]string{"-s", "2048M"}, 2, "-s: bad size"},
		{[]string{"-n", "-1"}, 2, "-n must be >= 0"},
		{[]string{"-timeout", "0s"}, 2, "-timeout must be > 0"},
		{[]string{"-d", "soft0", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-no-such-flag"}, 2, "flag provided but not defined"},
		{[]string{"-h"}, 0, "-seed"},
		{[]string{"-d", "no-such-device", "-s", "8"}, 1, "no-such-device"},
	} {
		code, _, errs := pingpongRun(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}

// The tool over this host's libibverbs devices: between the first two active ones
// where there are two (in the rxe VM, rxe0 and rxe1, with the wire between them),
// else within the one. Every row must be checked.
func TestActiveDevices(t *testing.T) {
	devs, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range devs {
		if d.Provider == "ibv" && d.Active() {
			names = append(names, d.Name)
		}
	}
	testutil.RequireRDMA(t, len(names) > 0, "no active libibverbs device")
	if len(names) == 1 {
		names = append(names, names[0])
	}
	code, out, errs := pingpongRun(t, "-d", names[0], "-d2", names[1], "-s", "8,64K,1M", "-n", "8", "-timeout", "5m")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errs, out)
	}
	if got := strings.Count(out, " ok\n"); got != 3 {
		t.Fatalf("%d checked rows, want 3:\n%s", got, out)
	}
	t.Logf("\n%s", out)
}
