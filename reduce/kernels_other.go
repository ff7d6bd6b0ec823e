//go:build !cgo || !(amd64 || arm64)

package reduce

import "github.com/ibcoll/ibcoll/collective"

// Without cgo, or off amd64 and arm64, the reference loops are the only kernels.

const (
	levelGo    = -1
	minNative  = 0
	maxSources = 8
)

var levelNames = map[int]string{levelGo: "go"}

func levels() []int { return []int{levelGo} }

var level = levelGo

func native(int, []byte, [][]byte, collective.DType, collective.Op) bool { return false }

func nativeScale(int, []byte, collective.DType, int) bool { return false }
