//go:build !linux

package topology

func processCPUs() []int { return nil }
