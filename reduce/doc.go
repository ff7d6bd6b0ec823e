// Package reduce holds the reduction kernels: dst = dst op src over host memory, for
// every element type and operator of package collective, and the final step of an
// average. Transports combine received data with Into and end an avg with Finalize;
// tools compute reference results with the same calls. Buffers need not be aligned.
//
// float16 and bfloat16 elements are widened to float32, combined, and rounded back to
// nearest even. Integer arithmetic wraps; avg sums in the element type and divides at
// the end (integers truncate toward zero, in 64 bits).
//
// The functions are pure and safe for concurrent use on distinct buffers.
package reduce
