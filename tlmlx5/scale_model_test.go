package tlmlx5

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/internal/topo"
)

// The scale model: for teams too large to run here, build every rank's operation
// graph (the same builder and algorithm table as a real run, on lazy endpoints that
// make no QP) and count what a rank would connect to and send, without moving data.
// Connections are the distinct peers of a rank's sends and receives plus its
// completion-agreement peers (coll's k-nomial tree of radix 8, rooted at the
// collective's root); messages are a rank's data writes, its ready-to-receives (one
// per receive) and its agreement messages (done to its parent, fin to each child),
// for one collective. `IBCOLL_SCALE_MODEL=full go test ./tlmlx5 -run TestScaleModel
// -v` prints the table that docs/design.md quotes (means are over the ranks built).

const agreeRadixModel = 8 // coll's agreeRadix

type modelRow struct {
	c       collective.Type
	alg     string
	count   int
	root    int
	minLink int
	maxLink int
	sumLink int
	minMsg  int
	maxMsg  int
	sumMsg  int
}

// modelRank builds rank r's task for row m on a lazy endpoint of a team of n and
// returns its connections and messages.
func modelRank(t *testing.T, ctx driver.Context, n, r int, m *modelRow) (links, msgs int, _ error) {
	ep, _, err := ctx.NewEndpoint(driver.TeamParams{Rank: r, Size: n, NextSeq: func() uint64 { return 1 },
		Messenger: fakeMessenger{m: &fakeMessages{close: map[int]bool{}}, rank: r}})
	require.NoError(t, err)
	defer func() { require.NoError(t, ep.Close()) }()
	k, err := buildTask(t, ep, m.c, m.alg, uniformArgs(m.c, n, r, m.root, m.count))
	if err != nil {
		return 0, 0, err
	}
	defer func() { require.NoError(t, k.Close()) }()
	require.Zero(t, ep.(*team).Links(), "building a task connects nothing")
	peers := map[int]bool{}
	for _, o := range k.ops {
		switch o.kind {
		case opSend:
			msgs++
		case opRecv:
			msgs++ // its ready-to-receive
		default:
			continue
		}
		peers[o.peer] = true
	}
	parent, children := topo.KNomialPeers(n, m.root, r, agreeRadixModel)
	if parent >= 0 {
		peers[parent] = true
		msgs++
	}
	for _, c := range children {
		peers[c] = true
		msgs++
	}
	return len(peers), msgs, nil
}

func TestScaleModel(t *testing.T) {
	ctx := openSoft(t)
	defer func() { require.NoError(t, ctx.Close()) }()
	// 1024 and up take minutes (a ring's graph has O(n) operations per rank, and
	// the VM suite runs this under emulation): $IBCOLL_SCALE_MODEL=full adds them.
	sizes := []int{64, 256}
	if os.Getenv("IBCOLL_SCALE_MODEL") == "full" {
		sizes = append(sizes, 1024, 4096, 16384)
	} else {
		t.Logf("sizes %v; IBCOLL_SCALE_MODEL=full adds 1024, 4096 and 16384", sizes)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "| N | collective | algorithm | connections per rank min / mean / max | messages per rank min / mean / max | ranks built |\n|---|---|---|---|---|---|\n")
	for _, n := range sizes {
		ranks := sampleRanks(n)
		// Every algorithm, radixes at the default; a vector of n elements for the
		// vector collectives (a ring's chunk each), one element per block for the
		// others. Counts of messages do not depend on the size.
		var rows []*modelRow
		for i := range algorithms {
			a := &algorithms[i]
			alg := a.name
			if a.radix {
				alg = fmt.Sprintf("%s:%d", a.name, defaultRadix)
			}
			rows = append(rows, &modelRow{c: a.coll, alg: alg, count: limitCounts(a.coll, n)[0]})
		}
		for _, m := range rows {
			if Fits(m.c, m.alg, n) != nil {
				continue
			}
			m.minLink, m.minMsg = 1<<30, 1<<30
			var refused error
			for _, r := range ranks {
				l, g, err := modelRank(t, ctx, n, r, m)
				if err != nil {
					refused = err
					break
				}
				m.minLink, m.maxLink, m.sumLink = min(m.minLink, l), max(m.maxLink, l), m.sumLink+l
				m.minMsg, m.maxMsg, m.sumMsg = min(m.minMsg, g), max(m.maxMsg, g), m.sumMsg+g
			}
			if refused != nil {
				// A limit of the wire format, which the table shows.
				require.ErrorIs(t, refused, driver.ErrNotSupported)
				fmt.Fprintf(&out, "| %d | %v | %s | refused: %v | | |\n", n, m.c, m.alg, refused)
				continue
			}
			k := float64(len(ranks))
			fmt.Fprintf(&out, "| %d | %v | %s | %d / %.1f / %d | %d / %.1f / %d | %d |\n", n, m.c, m.alg,
				m.minLink, float64(m.sumLink)/k, m.maxLink, m.minMsg, float64(m.sumMsg)/k, m.maxMsg, len(ranks))
			lg := 0
			for 1<<lg < n {
				lg++
			}
			switch {
			case m.alg == "linear" || m.alg == "sag" || m.alg == "srg":
				require.Equal(t, n-1, m.maxLink, "%v %s n=%d: the root talks to every rank", m.c, m.alg, n)
			case m.alg == "pairwise":
				require.Equal(t, n-1, m.minLink, "%v %s n=%d: every rank talks to every rank", m.c, m.alg, n)
			case m.alg == "ring" || m.alg == "chain":
				// The ring's 2 neighbours and the agreement's tree.
				require.LessOrEqual(t, m.maxLink, 2+(agreeRadixModel-1)*lg/3+2, "%v %s n=%d", m.c, m.alg, n)
			default:
				// k-nomial and recursive doubling: O(log n).
				require.LessOrEqual(t, m.maxLink, 3*lg+(agreeRadixModel-1)*(lg/3+1)+1, "%v %s n=%d", m.c, m.alg, n)
			}
		}
	}
	t.Logf("scale model (no data moved):\n%s", out.String())
}

// sampleRanks is the ranks the model builds: every rank up to 256, else 256 of them
// (the root, its first children and the last ranks included, the rest evenly
// spread), since a ring's or sag's graph has O(n) operations per rank.
func sampleRanks(n int) []int {
	if n <= 256 {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	seen := map[int]bool{}
	var out []int
	add := func(r int) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for r := range 64 {
		add(r)
		add(n - 1 - r)
	}
	for i := range 128 {
		add(64 + i*(n-128)/128)
	}
	return out
}
