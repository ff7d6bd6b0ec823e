// Package collective describes every collective once, for all the layers that need
// to know what a collective is: coll checks a rank's arguments from it, asym plans the
// staging of its buffers from it, and the transports build their algorithms for its
// Type. A row of the table says whether the collective has a root, whether it
// reduces, how each of a rank's two buffers is shaped (one block, a block per rank,
// a count of the rank's own, or per-rank counts and displacements) and used (read,
// written), normally and in place, and which buffer an asymmetric rank's staging
// replaces. Layout turns one rank's arguments into the extents of its buffers, with
// errors that name the argument.
//
// The package also holds what those layers share about the data: element types
// (DType) and reduction operators (Op).
//
// Everything here is pure: no allocation of buffers, no I/O. It is safe for
// concurrent use.
package collective
