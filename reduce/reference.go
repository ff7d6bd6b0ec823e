package reduce

import "github.com/ibcoll/ibcoll/collective"

// Reference and ReferenceFinalize are IntoMany and Finalize computed by the plain Go
// loops that define every kernel's result, never by the vectorized kernels those pick:
// an oracle for a reduction that the kernels computed (ibcoll-perf's --check), which a
// kernel's own fault cannot agree with. They are much slower.

// Reference sets dst = srcs[0] op srcs[1] op ..., folding from the left (OpAvg sums;
// ReferenceFinalize divides). Its arguments are IntoMany's.
func Reference(dst []byte, srcs [][]byte, dt collective.DType, op collective.Op) error {
	if err := checkMany("Reference", dst, srcs, dt, op); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	refInto(dst, srcs, dt, op)
	return nil
}

// ReferenceFinalize ends a reduction over n ranks as Finalize does: for OpAvg it
// divides every element by n (integers truncate toward zero).
func ReferenceFinalize(dst []byte, dt collective.DType, op collective.Op, n int) error {
	if divide, err := finalizing("ReferenceFinalize", dst, dt, op, n); !divide {
		return err
	}
	refScale(dst, dt, n)
	return nil
}
