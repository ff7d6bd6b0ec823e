package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
	"github.com/ibcoll/ibcoll/tlmlx5"
)

// decodeDoc reads the --json document in a run's output.
func decodeDoc(t *testing.T, out string) jsonDoc {
	t.Helper()
	at := strings.Index(out, "{")
	require.GreaterOrEqual(t, at, 0, "no JSON in %s", out)
	var doc jsonDoc
	require.NoError(t, json.Unmarshal([]byte(out[at:]), &doc), out)
	return doc
}

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
			doc := decodeDoc(t, out)
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
	doc := decodeDoc(t, out)
	require.NotZero(t, doc.Seed)
	require.LessOrEqual(t, doc.Seed, uint64(1<<53-1), "seed %d", doc.Seed)
	require.Equal(t, doc.Seed, uint64(float64(doc.Seed)), "a double changes the seed")
}

// TestDMHeaderWithoutShare: under a launcher that gives no local size, no share of the
// device's memory is set, and the header says the transport's default (before it said
// "up to 0 bytes", while dm buffers were allocated fine); with a share it says the
// share.
func TestDMHeaderWithoutShare(t *testing.T) {
	o, err := parseOptions([]string{"-m", "dm"}, io.Discard)
	require.NoError(t, err)
	header := func() string {
		old := os.Stdout
		r, w, err := os.Pipe()
		require.NoError(t, err)
		os.Stdout = w
		dmHeader(o, 256<<10, coll.Config{})
		os.Stdout = old
		w.Close()
		b, _ := io.ReadAll(r)
		return string(b)
	}
	require.Contains(t, header(), fmt.Sprintf("up to the transport's default of %d bytes", tlmlx5.DefaultDMCapacity))
	o.shareDM(256<<10, 4)
	require.Contains(t, header(), "takes up to 65536 bytes of its device's 262144")
}

// TestCUDAMemoryNeedsCUDA: buffers of CUDA memory where no CUDA driver answers are
// refused at once with the usage status, naming -m or --rank-mem (before, the run
// started and its first allocation failed as a collective, status 3); where CUDA
// answers, the same runs go ahead, data-checked.
func TestCUDAMemoryNeedsCUDA(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"-m", "host,cuda"}, "-m"},
		{[]string{"--rank-mem", "1:cuda-managed,host"}, "--rank-mem"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			args := append(tc.args, "-np", "2", "-c", "gather", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "--check", "-q")
			code, out := capture(t, args...)
			if mem.CUDAAvailable() {
				require.Equal(t, exitOK, code, out)
				return
			}
			require.Equal(t, exitUsage, code, out)
			require.Contains(t, out, tc.flag+": rank ")
			require.Contains(t, out, "no CUDA driver answers on this host")
		})
	}
}
