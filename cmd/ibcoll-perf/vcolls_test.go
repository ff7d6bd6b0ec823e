package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/testutil"
)

// The tests of the collectives that came with the collective table:
// reduce_scatter, allgatherv and alltoallv.

var newColls = []coll.CollType{coll.ReduceScatter, coll.Allgatherv, coll.Alltoallv}

func newCollList() string {
	var s []string
	for _, c := range newColls {
		s = append(s, c.String())
	}
	return strings.Join(s, ",")
}

// runJSON runs the tool with --json and decodes its document (nil when it
// printed none).
func runJSON(t *testing.T, args ...string) (int, *jsonDoc, string) {
	t.Helper()
	code, out := capture(t, append([]string{"--json"}, args...)...)
	i := strings.Index(out, "{")
	if i < 0 {
		return code, nil, out
	}
	var doc jsonDoc
	require.NoError(t, json.Unmarshal([]byte(out[i:]), &doc), out)
	return code, &doc, out
}

// strongMem gives ranks of an n-rank team different memory types from one
// another and from -m, rank 0 always mixing host and sim.
func strongMem(n int) string {
	specs := []string{"0:host,sim", "1:sim,host", "2:sim,sim", "3:host,host", "4:sim,sim"}
	return strings.Join(specs[:n], ";")
}

// TestNewCollectivesChecked runs the three collectives with --check on
// every combination of team size, weak or strong asymmetry, persistent or
// not, in place or not.
func TestNewCollectivesChecked(t *testing.T) {
	seed := testutil.Rand(t).Uint64()
	types := [][2]string{{"int32", "sum"}, {"float32", "avg"}, {"bfloat16", "prod"}, {"uint8", "bxor"}, {"float64", "max"}, {"int16", "min"}}
	dir := t.TempDir()
	i := 0
	for _, np := range []int{1, 2, 3, 5} {
		for _, asym := range []string{"weak", "strong"} {
			for _, persistent := range []bool{false, true} {
				for _, inPlace := range []bool{false, true} {
					name := fmt.Sprintf("np%d/%s/persistent=%v/in-place=%v", np, asym, persistent, inPlace)
					dt := types[i%len(types)]
					i++
					args := []string{"-np", fmt.Sprint(np), "-c", newCollList(), "-b", "8", "-e", "4K", "-f", "8", "-n", "3", "-w", "1",
						"--check", "-d", dt[0], "-o", dt[1], "-seed", fmt.Sprint(seed + uint64(i)), "-m", "host,sim",
						"--plot", filepath.Join(dir, fmt.Sprintf("p%d.svg", i))}
					plotFile := args[len(args)-1]
					if asym == "strong" {
						args = append(args, "--rank-mem", strongMem(np))
					}
					if persistent {
						args = append(args, "-p")
					}
					if inPlace {
						args = append(args, "-i")
					}
					t.Run(name, func(t *testing.T) {
						code, doc, out := runJSON(t, args...)
						require.Equal(t, exitOK, code, "%v\n%s", args, out)
						require.Equal(t, np, doc.Ranks)
						require.Equal(t, persistent, doc.Persistent)
						require.Equal(t, inPlace, doc.InPlace)
						rows := map[string]int{}
						for _, r := range doc.Rows {
							require.Equal(t, "ok", r.Check, "%+v", r)
							require.Empty(t, r.Errors)
							require.NotEmpty(t, r.Alg, "%+v", r)
							rows[r.Collective]++
						}
						svg, err := os.ReadFile(plotFile)
						require.NoError(t, err)
						for _, c := range newColls {
							require.Equal(t, 4, rows[c.String()], "%v: a checked row per size (8, 64, 512, 4096)", c)
							require.Contains(t, string(svg), ">"+c.String()+"<", "%v has a series in the plot", c)
						}
					})
				}
			}
		}
	}
}

// TestCheckCatchesNewCollectives corrupts one element of what a rank reads
// back, through the test hook, and expects the check to fail with exit 1
// and to say where: rank, iteration, byte offset, element, the block it
// lies in, and both values.
func TestCheckCatchesNewCollectives(t *testing.T) {
	const n, rank, iter, count = 3, 1, 2, 16 // int32, 64-byte blocks
	cases := []struct {
		c       coll.CollType
		inPlace bool
		elem    func(s shape) int // the element to corrupt
		where   string
	}{
		{coll.ReduceScatter, false, func(shape) int { return 5 }, "(element 5): "},
		// In place, the other ranks' blocks must keep their input.
		{coll.ReduceScatter, true, func(s shape) int { return 2*s.count + 3 }, "in rank 2's block, its element 3, which must keep its input"},
		{coll.Allgatherv, false, func(s shape) int { return s.displs[0] + 1 }, "in rank 0's block, its element 1"},
		// A write into a gap is as wrong as a wrong block.
		{coll.Allgatherv, true, func(s shape) int { return s.displs[2] + s.counts[2] }, "in a gap between blocks"},
		{coll.Alltoallv, false, func(s shape) int { return s.displs[2] }, "in rank 2's block, its element 0"},
		{coll.Alltoallv, true, func(s shape) int { return s.displs[0] + s.counts[0] }, "in a gap between blocks"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v/in-place=%v", tc.c, tc.inPlace), func(t *testing.T) {
			s := newShape(tc.c, rank, n, count, 0, tc.inPlace)
			e := tc.elem(s)
			corruptOutput = func(s shape, it int, got []byte) {
				if s.rank == rank && it == iter {
					got[e*4+1] ^= 0x40
				}
			}
			defer func() { corruptOutput = nil }()
			args := []string{"-np", fmt.Sprint(n), "-c", tc.c.String(), "-b", "64", "-e", "64", "-d", "int32", "-n", "4", "-w", "1", "--check", "-q", "-m", "host,sim"}
			if tc.inPlace {
				args = append(args, "-i")
			}
			start := time.Now()
			code, out := capture(t, append(args, "--timeout", "20s")...)
			// The other ranks must not wait --timeout for the failed one.
			require.Less(t, time.Since(start), 10*time.Second, out)
			require.Equal(t, exitCheck, code, out)
			require.Contains(t, out, "FAIL")
			require.Contains(t, out, fmt.Sprintf("check: rank %d iteration %d: byte offset %d (element %d", rank, iter, e*4+1, e), out)
			require.Contains(t, out, tc.where, out)
			m := regexp.MustCompile(`want ([0-9a-f]{8}), got ([0-9a-f]{8})`).FindStringSubmatch(out)
			require.NotNil(t, m, out)
			require.NotEqual(t, m[1], m[2])
			require.Equal(t, 1, strings.Count(out, "check: rank"), "only the corrupted rank fails:\n%s", out)
		})
	}
}

// TestAlgFlag: --alg takes the new algorithms by name, for every
// collective or per collective, and refuses what cannot run.
func TestAlgFlag(t *testing.T) {
	cases := []struct {
		np   int
		c    string
		alg  string
		want map[string]string // collective -> algorithm of its rows, or its prefix ending in *
	}{
		{2, "reduce_scatter", "rh", map[string]string{"reduce_scatter": "rh"}},
		{4, "reduce_scatter,allreduce", "ring", map[string]string{"reduce_scatter": "ring", "allreduce": "ring"}},
		{3, "reduce_scatter,allgatherv,alltoallv,bcast,reduce", "reduce_scatter=ring,allgatherv=ring,alltoallv=pairwise,bcast=sag,reduce=srg",
			map[string]string{"reduce_scatter": "ring", "allgatherv": "ring", "alltoallv": "pairwise", "bcast": "sag", "reduce": "srg"}},
		// Collectives that --alg does not name keep the default.
		{4, "reduce_scatter,bcast", "reduce_scatter=rh", map[string]string{"reduce_scatter": "rh", "bcast": "knomial*"}},
	}
	for _, tc := range cases {
		code, doc, out := runJSON(t, "-np", fmt.Sprint(tc.np), "-c", tc.c, "--alg", tc.alg, "-b", "64", "-e", "256", "-f", "4", "-n", "2", "--check", "-d", "int32")
		require.Equal(t, exitOK, code, "--alg %s: %s", tc.alg, out)
		seen := map[string]bool{}
		for _, r := range doc.Rows {
			require.Equal(t, "ok", r.Check, "%+v", r)
			if w := tc.want[r.Collective]; strings.HasSuffix(w, "*") {
				require.True(t, strings.HasPrefix(r.Alg, strings.TrimSuffix(w, "*")), "--alg %s: %+v", tc.alg, r)
			} else {
				require.Equal(t, w, r.Alg, "--alg %s: %+v", tc.alg, r)
			}
			seen[r.Collective] = true
		}
		require.Len(t, seen, len(tc.want))
	}
	// The header names the algorithm.
	code, out := capture(t, "-np", "2", "-c", "reduce_scatter,bcast", "--alg", "reduce_scatter=rh,bcast=sag", "-b", "64", "-e", "64", "-n", "1", "--check")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "# collective reduce_scatter, algorithm rh, non-persistent")
	require.Contains(t, out, "# collective bcast, algorithm sag, non-persistent")
	require.Regexp(t, `\n +64 +64 +rh .* ok\n`, out)

	for _, bad := range []struct {
		args []string
		why  string
	}{
		{[]string{"-np", "3", "-c", "reduce_scatter", "--alg", "rh"}, "power-of-two"},
		{[]string{"-np", "3", "-c", "allgatherv,alltoallv", "--alg", "ring"}, `"ring" is not an algorithm of alltoallv (valid: pairwise)`},
		{[]string{"-np", "2", "-c", "alltoallv", "--alg", "alltoallv=ring"}, "valid: pairwise"},
		{[]string{"-np", "2", "-c", "bcast", "--alg", "bcast=sag,bcast=chain"}, "bcast given twice"},
		{[]string{"-np", "2", "-c", "bcast", "--alg", "bcst=sag"}, "unknown collective"},
		{[]string{"-np", "2", "-c", "bcast", "--alg", "bcast="}, "want COLL=NAME"},
		{[]string{"-np", "2", "-c", "bcast", "--alg", "sag,chain"}, "want one NAME"},
	} {
		code, out := capture(t, bad.args...)
		require.Equal(t, exitUsage, code, "%v: %s", bad.args, out)
		require.Contains(t, out, "--alg: ", "%v: the message names the flag", bad.args)
		require.Contains(t, out, bad.why, "%v", bad.args)
	}
}

// TestEnvironment: the tool completes its coll.Config with
// coll.ConfigFromEnv, and its flags win over the environment.
func TestEnvironment(t *testing.T) {
	args := []string{"-np", "2", "-c", "reduce_scatter", "-b", "64", "-e", "64", "-n", "1", "--check"}

	t.Setenv("IBCOLL_ALG_REDUCE_SCATTER", "rh")
	code, out := capture(t, args...)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "algorithm rh (from $IBCOLL_ALG_REDUCE_SCATTER)")
	require.Regexp(t, `\n +64 +64 +rh .* ok\n`, out)

	code, out = capture(t, append(args, "--alg", "ring")...)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "algorithm ring, ")
	require.Regexp(t, `\n +64 +64 +ring .* ok\n`, out, "--alg wins over the environment")

	// rh needs a power-of-two team: refused before any rank starts.
	code, out = capture(t, "-np", "3", "-c", "reduce_scatter")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "$IBCOLL_ALG_REDUCE_SCATTER: reduce_scatter rh: ")
	require.Contains(t, out, "needs a power-of-two team, not 3 ranks")

	t.Setenv("IBCOLL_ALG_REDUCE_SCATTER", "pairwise")
	code, out = capture(t, args...)
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, `$IBCOLL_ALG_REDUCE_SCATTER: "pairwise" is not an algorithm of reduce_scatter`)
	t.Setenv("IBCOLL_ALG_REDUCE_SCATTER", "")

	// An unknown name for a collective this run does not use failed as a device
	// that would not open (exit status 3).
	t.Setenv("IBCOLL_ALG_SCATTER", "abc")
	code, out = capture(t, "-np", "2", "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0")
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, `$IBCOLL_ALG_SCATTER: "abc" is not an algorithm of scatter`)
	t.Setenv("IBCOLL_ALG_SCATTER", "")

	// A misspelt variable was ignored without a word (session 40's audit).
	t.Setenv("IBCOLL_ALG_REDUCESCATTER", "rh")
	code, out = capture(t, args...)
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "$IBCOLL_ALG_REDUCESCATTER: names no collective (valid: ")
	require.Contains(t, out, "IBCOLL_ALG_REDUCE_SCATTER")
	os.Unsetenv("IBCOLL_ALG_REDUCESCATTER") // t.Setenv restores it after the test

	t.Setenv("IBCOLL_GID_INDEX", "x")
	code, out = capture(t, args...)
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, "IBCOLL_GID_INDEX")
	t.Setenv("IBCOLL_GID_INDEX", "")

	// Refused before anything opens, naming the variable (until session 40 each
	// rank's NewContext failed, exit status 3).
	t.Setenv("IBCOLL_DEVICE", "nosuch0")
	code, out = capture(t, args...)
	require.Equal(t, exitUsage, code, out)
	require.Contains(t, out, `$IBCOLL_DEVICE: no device "nosuch0"`)
	code, out = capture(t, append(args, "--device", "soft0")...)
	require.Equal(t, exitOK, code, "--device wins over $IBCOLL_DEVICE: %s", out)
}
