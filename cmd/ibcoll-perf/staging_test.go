package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStagedBytes: each JSON row's staged_bytes is what staging copied per iteration,
// summed over ranks: 0 when every buffer is reachable, exactly the staged blocks
// otherwise, and the per-rank staging lines say which side goes through what.
func TestStagedBytes(t *testing.T) {
	const np, size = 3, 4096
	for _, c := range []struct {
		coll, mem, rankMem string
		persistent         bool
		want               int64 // per iteration, summed over ranks
		says               string
	}{
		{"gather", "host", "", false, 0, "rank 0: nothing staged"},
		{"gather", "host", "0:host,sim", false, np * size, "rank 0: dst sim via host scratch"},
		{"gather", "host", "1:sim,host;2:sim,host", true, 2 * size, "rank 1: src sim via host scratch"},
		{"scatter", "sim,sim", "", false, np*size + (np-1)*size + size, "rank 0: src sim via host scratch"},
		{"allreduce", "sim,host", "", true, np * size, "src sim via host scratch"},
	} {
		t.Run(fmt.Sprintf("%s/%s/%s/p=%v", c.coll, c.mem, c.rankMem, c.persistent), func(t *testing.T) {
			args := []string{"-np", fmt.Sprint(np), "-c", c.coll, "-b", fmt.Sprint(size), "-e", fmt.Sprint(size), "-n", "3",
				"--check", "--json", "-m", c.mem}
			if c.rankMem != "" {
				args = append(args, "--rank-mem", c.rankMem)
			}
			if c.persistent {
				args = append(args, "-p")
			}
			code, out := capture(t, args...)
			require.Equal(t, exitOK, code, out)
			var doc jsonDoc
			require.NoError(t, json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &doc), out)
			require.Len(t, doc.Rows, 1)
			row := doc.Rows[0]
			require.Equal(t, "ok", row.Check)
			require.Equal(t, c.want, row.StagedBytes, "%+v", row)
			require.Len(t, row.Staging, np)
			require.Contains(t, strings.Join(row.Staging, "\n"), c.says)
		})
	}
}
