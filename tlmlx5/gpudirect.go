package tlmlx5

import "github.com/ibcoll/ibcoll/mem"

// GPUDirect writes. Where the NIC writes a collective's output straight into GPU
// memory, the CPU sees the completions before work on the GPU is sure to see the
// bytes, on devices that order such writes for nobody
// (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING none): a kernel that the caller
// launches after Wait could read stale data. So a task whose output is such memory
// flushes once its post is done, before State reports it (mem.FlushGPUDirectWrites,
// which does nothing on devices that order the writes for their owner). Staged
// outputs need none: the copy engine moves them, in order.

// flushGPUDirect is mem.FlushGPUDirectWrites; a var so that tests can count calls.
var flushGPUDirect = mem.FlushGPUDirectWrites

// gpuDirectOut reports whether out is GPU memory that the NIC writes directly.
func gpuDirectOut(out *lbuf) bool {
	return out != nil && out.dm == nil && (out.typ == mem.CUDA || out.typ == mem.CUDAManaged)
}
