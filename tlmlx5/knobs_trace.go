//go:build ibcoll_stagetrace

package tlmlx5

import (
	"github.com/ibcoll/ibcoll/internal/xknob"
)

// In the diagnosis build (asym's stage trace), the local copies in pieces take
// their tunables from the environment, for experiments on a GPU machine:
// IBCOLL_X_COPY_PIECE (copyPiece, bytes) and IBCOLL_X_POLL_PIECES (pollPieces); and
// IBCOLL_X_AHEAD_OUT_MAX (aheadOutMax, bytes; 0 turns staged outputs a post ahead off).
func init() {
	if v, ok := xknob.Int("IBCOLL_X_AHEAD_OUT_MAX", 0); ok {
		aheadOutMax = v
	}
	if v, ok := xknob.Int("IBCOLL_X_COPY_PIECE", 1); ok {
		copyPiece = v
	}
	if v, ok := xknob.Int("IBCOLL_X_POLL_PIECES", 1); ok {
		pollPieces = v
	}
}
