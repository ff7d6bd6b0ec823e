//go:build !cgo

package topology

// go-nvml needs cgo: a build without it has no NVML.
func defaultGPUs() GPUSource {
	return NoGPUs("this build has no NVML (built without cgo)")
}
