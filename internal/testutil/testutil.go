// Package testutil holds the helpers every test package of ibcoll shares:
// hardware requirements that skip with a reason or fail where the hardware
// must exist, seeded random data, and the leak check run at package exit.
package testutil

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequireEnv is the environment variable naming hardware that must be
// present: a comma list of "rdma", "cuda", "rxevm". Where it names a
// feature, a test that would skip for lack of it fails instead.
const RequireEnv = "IBCOLL_REQUIRE"

// Required reports whether IBCOLL_REQUIRE names feature.
func Required(feature string) bool {
	for _, f := range strings.Split(os.Getenv(RequireEnv), ",") {
		if strings.TrimSpace(f) == feature {
			return true
		}
	}
	return false
}

// Require skips t when ok is false, or fails it when IBCOLL_REQUIRE names
// feature: a skip on the machine that has the hardware would hide a bug.
func Require(t testing.TB, feature string, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if Required(feature) {
		t.Fatalf("%s required (%s=%s) but unavailable: %s", feature, RequireEnv, os.Getenv(RequireEnv), why)
	}
	t.Skipf("no %s: %s (set %s=%s to make this a failure)", feature, why, RequireEnv, feature)
}

// RequireRDMA needs a real RDMA device; ok says whether one was found.
func RequireRDMA(t testing.TB, ok bool, why string) { t.Helper(); Require(t, "rdma", ok, why) }

// RequireCUDA needs a usable CUDA device.
func RequireCUDA(t testing.TB, ok bool, why string) { t.Helper(); Require(t, "cuda", ok, why) }

// SeedEnv overrides the random seed of data checks, to replay a failure.
const SeedEnv = "IBCOLL_SEED"

// Rand returns a generator with a fresh seed (or $IBCOLL_SEED), and logs
// the seed so that a failure can be replayed.
func Rand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay with %s=%d)", seed, SeedEnv, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Fill fills b with random bytes from r. Data checks never use zeros, so
// a transfer that did nothing cannot pass.
func Fill(r *rand.Rand, b []byte) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for ; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

// FirstDiff returns the first offset where a and b differ, or -1.
func FirstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

// Equal fails t with the first differing offset and values.
func Equal(t testing.TB, want, got []byte, what string) {
	t.Helper()
	if i := FirstDiff(want, got); i >= 0 {
		w, g := "EOF", "EOF"
		if i < len(want) {
			w = fmt.Sprintf("%#02x", want[i])
		}
		if i < len(got) {
			g = fmt.Sprintf("%#02x", got[i])
		}
		t.Fatalf("%s: first difference at offset %d of %d/%d bytes: want %s, got %s", what, i, len(want), len(got), w, g)
	}
}

// LeakCheck runs a package's tests and fails the run if check reports
// leaked objects afterwards. Use it from TestMain.
func LeakCheck(m *testing.M, checks ...func() error) {
	code := m.Run()
	if code == 0 {
		for _, c := range checks {
			if err := c(); err != nil {
				fmt.Fprintln(os.Stderr, "leak check:", err)
				code = 1
			}
		}
	}
	os.Exit(code)
}
