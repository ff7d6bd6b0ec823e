package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckSaysOkOnlyWhereCompared: --check marks a row "ok" only where some rank
// compared bytes. A team of one whose rank has no output (bcast's root, an in-place
// scatter's root) compares nothing: its row says "-" (before it said "ok", and a
// corruption of every byte it read went unseen, since nothing was read). Rows of the
// same runs that have an output say "ok".
func TestCheckSaysOkOnlyWhereCompared(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-np", "1", "-c", "bcast"}, "-"},
		{[]string{"-np", "1", "-c", "scatter", "-i"}, "-"},
		{[]string{"-np", "1", "-c", "gather"}, "ok"},
		{[]string{"-np", "2", "-c", "bcast"}, "ok"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append(tc.args, "-b", "8", "-e", "8", "-n", "2", "-w", "0", "--check", "--json", "-q")
			code, out := capture(t, args...)
			require.Equal(t, exitOK, code, out)
			var doc struct{ Rows []struct{ Check string } }
			require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &doc), out)
			require.Len(t, doc.Rows, 1, out)
			row := doc.Rows[0]
			require.Equal(t, tc.want, row.Check, out)
		})
	}
}

// TestDrawnSeedSurvivesJSON: a seed drawn from the clock fits a double exactly (at
// most 2^53-1), so that jq or JavaScript reads back from --json the seed that replays
// the run; before, it was the clock's nanoseconds (about 1.8e18), which such readers
// round to another seed.
func TestDrawnSeedSurvivesJSON(t *testing.T) {
	code, out := capture(t, "-np", "1", "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "--check", "--json", "-q")
	require.Equal(t, exitOK, code, out)
	var doc struct{ Seed uint64 }
	require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &doc), out)
	require.NotZero(t, doc.Seed)
	require.LessOrEqual(t, doc.Seed, uint64(1<<53-1), "seed %d", doc.Seed)
	require.Equal(t, doc.Seed, uint64(float64(doc.Seed)), "a double changes the seed")
}
