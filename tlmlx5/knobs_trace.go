//go:build ibcoll_stagetrace

package tlmlx5

import (
	"os"
	"strconv"
)

// In the diagnosis build (asym's stage trace), the local copies in pieces take
// their tunables from the environment, for experiments on a GPU machine:
// IBCOLL_X_COPY_PIECE (copyPiece, bytes) and IBCOLL_X_POLL_PIECES (pollPieces); and
// IBCOLL_X_AHEAD_OUT_MAX (aheadOutMax, bytes; 0 turns staged outputs a post ahead off).
func init() {
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_AHEAD_OUT_MAX")); err == nil && v >= 0 {
		aheadOutMax = v
	}
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_COPY_PIECE")); err == nil && v > 0 {
		copyPiece = v
	}
	if v, err := strconv.Atoi(os.Getenv("IBCOLL_X_POLL_PIECES")); err == nil && v > 0 {
		pollPieces = v
	}
}
