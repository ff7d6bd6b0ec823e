//go:build cgo && arm64

package reduce

/*
#include "kernels.h"
*/
import "C"

// arm64 has one level, kernels_arm64.c's NEON loops: AArch64 requires NEON, so
// there is nothing to choose at run time.
const levelNEON = C.IBC_LVL_BASE

var levelNames = map[int]string{levelGo: "go", levelNEON: "neon"}

// levels lists the levels this CPU runs, best last.
func levels() []int { return []int{levelGo, levelNEON} }
