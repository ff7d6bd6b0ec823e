package mem

// SimAlias exposes a sim buffer's read-write view so tests can fill and check
// sim memory without going through the copies under test.
func SimAlias(b *Buffer) []byte { return b.alias[:b.size:b.size] }

// SimMappedLen is the length of the PROT_NONE mapping that TypeOf searches.
func SimMappedLen(b *Buffer) int { return len(b.mapping) }

// BounceSize is the chunk through which staged copies move.
const BounceSize = bounceSize

// SetCUDAWaitFlag switches between the flag-and-per-thread-stream waits (true, the
// default) and cuMemcpy with polled events (false), for side-by-side measurements.
func SetCUDAWaitFlag(on bool) { setCUDAWaitFlag(on) }

// CUDABounced counts the copies from pageable host memory that went through the
// driver-pinned bounce buffers.
func CUDABounced() uint64 { return cudaBounced() }

// SetGPUIssueOnWorker sets gpuIssueOnWorker and returns its old value.
func SetGPUIssueOnWorker(on bool) bool {
	old := gpuIssueOnWorker
	gpuIssueOnWorker = on
	return old
}

// SetCopyTurn sets the copy turn's bound (setCopyTurn): synchronous copies from the
// device to host memory of at least n bytes go to one queue of the process (0: off).
func SetCopyTurn(n int) { setCopyTurn(n) }

// CopyTurnMin is the copy turn's bound that the CUDA driver's opening set.
func CopyTurnMin() int { return copyTurnMin }

// CUDATurned counts the copies that took the copy turn.
func CUDATurned() uint64 { return cudaTurned() }

// ForceGPUDirectFlush flushes GPUDirect writes whatever the device's ordering says.
func ForceGPUDirectFlush() error { return gdrFlush() }
