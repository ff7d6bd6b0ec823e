// Package reduce holds the reduction kernels: dst = src0 op src1 op ... over host
// memory, for every element type and operator of package collective, and the final
// step of an average. Transports combine received data with Into (two operands) and
// IntoMany (k sources in one pass, so that each is read once), and end an avg with
// Finalize; tools compute reference results with the same calls. Buffers need not be
// aligned. A destination may be its first source; it may overlap no other source.
//
// float16 and bfloat16 elements are widened to float32, combined (all of IntoMany's
// sources at once), and rounded back to nearest even. Integer arithmetic wraps; avg
// sums in the element type and divides at the end (integers truncate toward zero, in
// 64 bits). Float min and max keep the running value unless the next one compares
// below (above) it, so a NaN already in the result stays and a NaN source is skipped.
// When both operands of a sum or product are NaN, which one's payload the result
// carries is not specified.
//
// Kernels. The Go loops of ref.go define every result; they run without cgo, off
// amd64, and below minNative bytes, where a cgo call's fixed cost exceeds what the
// vector loop saves. On amd64 with cgo, kernels.c compiles the same loops for three
// instruction-set levels (baseline x86-64, AVX2 with F16C, AVX-512) and the package
// picks the best level the CPU reports at start (golang.org/x/sys/cpu). The C loops
// keep the reference's order of operations, so results agree bit for bit (NaN
// payloads aside); FuzzKernels checks every level this CPU runs against the
// reference. C with the compiler's vectorizer was chosen over Go assembly: one
// source of loops serves every level, and the call's cost (about 45 ns measured)
// only matters below a few KiB.
//
// The functions are pure and safe for concurrent use on distinct buffers; they do
// not allocate.
package reduce
