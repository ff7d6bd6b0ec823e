// Package reduce holds the reduction kernels: dst = src0 op src1 op ... over host
// memory, for every element type and operator of package collective, and the final
// step of an average. Transports combine received data with Into (two operands) and
// IntoMany (k sources in one pass, so that each is read once), and end an avg with
// Finalize. Tools that check a reduction compute the expected result with Reference and
// ReferenceFinalize: the plain Go loops that define every kernel's result, so a
// kernel's fault cannot agree with itself. Buffers need not be
// aligned. A destination may be its first source; it may overlap no other source.
//
// float16 and bfloat16 elements are widened to float32, combined (all of IntoMany's
// sources at once), and rounded back to nearest even. Integer arithmetic wraps; avg
// sums in the element type and divides at the end (integers truncate toward zero, in
// 64 bits). Float min and max keep the running value unless the next one compares
// below (above) it, so a NaN already in the result stays and a NaN source is skipped.
// A float16 or bfloat16 NaN that comes out of a fold is quiet and keeps the sign and
// the top bits of the payload of the NaN it came from (for float16, as F16C's
// VCVTPS2PH and AArch64's FCVTN write it, with FPCR's DN and AHP clear); float32 and
// float64 min and max return the kept operand as it is, and IntoMany with one source
// copies it. When both operands of a sum or product are NaN, which one's sign and
// payload the result carries is not specified.
//
// Kernels. The Go loops of ref.go define every result; they run without cgo, on
// architectures other than amd64 and arm64, and below minNative bytes, where a cgo
// call's fixed cost exceeds what the vector loop saves. With cgo, the C loops of
// kernels_body.h are compiled per instruction-set level and the package picks the
// best level the CPU runs at start. On amd64 (kernels.c) the levels are baseline
// x86-64, AVX2 with F16C, AVX-512, and above it two that replace half precision's
// kernels (kernels_x86half.h): avx512bf16 (AVX512_BF16: bfloat16 rounds 32 elements
// with one VCVTNE2PS2BF16, falling back to integer rounding for a vector with a
// subnormal result, which that instruction reads as zero) and avx512fp16 (AVX512_FP16
// as well: float16 adds and multiplies two sources in binary16 directly, which is the
// reference's float32-then-round exactly because binary32 has at least 2×11+2 bits;
// more sources keep the float32 fold). On the avx512 and avx512bf16 levels, float16
// min and max pick operands by 16-bit order keys without converting (a pick is
// exact), making NaNs quiet as the reference does; avx512fp16 uses VMINPH and VMAXPH.
// Where the CPU runs 512-bit operations as two 256-bit halves (AMD Zen 4), those two
// levels convert float16 folds of two sources on 256-bit vectors, as the avx2 level
// does ("-half256": faster there). Features come from golang.org/x/sys/cpu, and
// AVX512_FP16, which it lacks, and the CPU family from CPUID. On arm64 (kernels_arm64.c) one level
// compiles the loops for AArch64's base, NEON included. The C loops keep the
// reference's order of operations, so results agree bit for bit (but for a sum or
// product of two NaNs); FuzzKernels, TestHalfTinyPairs, TestF16MinMaxEveryValue,
// TestF16NaNBits and TestHalfNaNsEveryLevel check every level this CPU runs against
// the reference. C with the compiler's vectorizer was chosen over Go assembly: one
// source of loops serves every level, and the call's cost (about 45 ns measured)
// only matters below a few KiB.
//
// The functions are pure and safe for concurrent use on distinct buffers; they do
// not allocate.
package reduce
