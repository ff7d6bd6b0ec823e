package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSaysHowItRan: the header and the JSON document say what changes the numbers or
// reproduces the run: all-or-nothing and what turned it on (it adds an agreement to
// every post, and was silent), the root, --check's seed, and whether the ranks line up
// before every iteration (the JSON had none of these); and that without warm-up the
// first timed iteration pays for connecting.
func TestSaysHowItRan(t *testing.T) {
	code, out := capture(t, "-np", "2", "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q", "--all-or-nothing")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "non-persistent, all-or-nothing (from --all-or-nothing)")
	require.Contains(t, out, "no warm-up (-w 0): the first timed iteration includes connecting")
	code, out = capture(t, "-np", "2", "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q")
	require.Equal(t, exitOK, code, out)
	require.NotContains(t, out, "all-or-nothing")

	for _, c := range []struct {
		args    []string
		env     string
		from    string
		linedUp bool
	}{
		{[]string{"--all-or-nothing", "--sync"}, "", "--all-or-nothing", true},
		{[]string{"--check"}, "1", "$IBCOLL_ALL_OR_NOTHING", true},
		{nil, "", "", false},
	} {
		t.Setenv("IBCOLL_ALL_OR_NOTHING", c.env)
		args := append([]string{"-np", "2", "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q",
			"--json", "--seed", "77", "-r", "1"}, c.args...)
		code, out := capture(t, args...)
		require.Equal(t, exitOK, code, out)
		var doc jsonDoc
		require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
		require.Equal(t, 1, doc.Root, "%v", args)
		require.Equal(t, uint64(77), doc.Seed, "%v", args)
		require.Equal(t, c.linedUp, doc.LinedUp, "%v", args)
		require.Equal(t, c.from != "", doc.AllOrNothing, "%v", args)
		require.Equal(t, c.from, doc.AllOrNothingFrom, "%v", args)
	}
}

// TestConnectionsLineSaysBarrierShare: the connections line says how many of a rank's
// connections the tool's own line-up barrier made (it counted them as the measured
// collective's: a 16-rank chain bcast, 2 peers at most, read "max 9").
func TestConnectionsLineSaysBarrierShare(t *testing.T) {
	re := regexp.MustCompile(`connections per rank: min (\d+), max (\d+), mean ([0-9.]+) \(of 15 peers\), of which this tool's line-up barrier made min (\d+), max (\d+), mean ([0-9.]+) first`)
	parse := func(args ...string) (all, barrier [3]float64) {
		code, out := capture(t, append([]string{"-np", "16", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-q"}, args...)...)
		require.Equal(t, exitOK, code, out)
		m := re.FindStringSubmatch(out)
		require.NotNil(t, m, out)
		for i := range 3 {
			all[i], _ = strconv.ParseFloat(m[1+i], 64)
			barrier[i], _ = strconv.ParseFloat(m[4+i], 64)
		}
		return all, barrier
	}
	all, barrier := parse("-c", "barrier")
	require.Equal(t, all, barrier, "a run of barriers makes only the line-up's connections")
	all, barrier = parse("-c", "bcast", "--alg", "chain")
	require.Greater(t, all[2], barrier[2], "the chain adds links of its own")
	for i := range 3 {
		require.LessOrEqual(t, barrier[i], all[i])
	}
}

// TestCheckColumnOnlyWhereCompared: the check column says "ok" only where --check
// compared bytes: not for a barrier, nor for -b 0's empty row of a collective without
// gaps (it said "ok" for both, and for scatterv's, whose outputs are single blocks);
// the gaps of gatherv's root are compared even there.
func TestCheckColumnOnlyWhereCompared(t *testing.T) {
	code, out := capture(t, "-np", "3", "-c", "barrier,gather,gatherv,scatterv", "--check", "-b", "0", "-e", "4", "-n", "1", "-w", "0", "-q", "--json")
	require.Equal(t, exitOK, code, out)
	var doc jsonDoc
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	got := map[string]string{}
	for _, r := range doc.Rows {
		got[fmt.Sprintf("%s/%d", r.Collective, r.Bytes)] = r.Check
	}
	require.Equal(t, map[string]string{"barrier/0": "-", "gather/0": "-", "gather/1": "ok", "gather/2": "ok", "gather/4": "ok",
		"gatherv/0": "ok", "gatherv/1": "ok", "gatherv/2": "ok", "gatherv/4": "ok",
		"scatterv/0": "-", "scatterv/1": "ok", "scatterv/2": "ok", "scatterv/4": "ok"}, got)
}

// TestEmptyRowMovesNothing: -b 0's row moves no byte in any collective, the
// v-collectives included (ranks r%3 == 2 sent one element), and the staging lines
// describe the first row that moves bytes (they described the empty row: "nothing
// staged" above rows that staged).
func TestEmptyRowMovesNothing(t *testing.T) {
	code, out := capture(t, "-np", "3", "-c", "gather,gatherv,scatterv,allgatherv,alltoallv", "-m", "sim", "-b", "0", "-e", "1",
		"-n", "1", "-w", "0", "-q", "--check", "--json")
	require.Equal(t, exitOK, code, out)
	var doc jsonDoc
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	for _, r := range doc.Rows {
		if r.Bytes == 0 {
			require.Zero(t, r.StagedBytes, "%s's empty row staged bytes", r.Collective)
		} else {
			require.NotZero(t, r.StagedBytes, "%s at %d bytes stages its sim buffers", r.Collective, r.Bytes)
		}
	}
	code, out = capture(t, "-np", "3", "-c", "gather", "-m", "sim", "-b", "0", "-e", "1", "-n", "1", "-w", "0", "-q")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "# staging (at 1 bytes")
	require.NotContains(t, out, "nothing staged")
}
