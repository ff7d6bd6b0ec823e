/*
 * mpi_coll: times Open MPI's MPI_Gather and MPI_Scatter the way ibcoll-perf
 * times ibcoll's: per block size (bytes per rank), warm-up iterations, then
 * timed iterations whose time is the slowest rank's; prints one line per
 * collective and size: "<collective> <bytes> <avg_us> <min_us> <max_us>".
 *
 * usage: mpirun -np N mpi_coll [iters] [size...]
 * It is ibcoll's own comparison peer for `make bench`, run in the rxe VM.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run(const char *name, int gather, long bytes, int iters, int rank, int size)
{
	char *small = malloc(bytes), *big = rank == 0 ? malloc(bytes * size) : NULL;
	double sum = 0, lo = 1e30, hi = 0;
	if (!small || (rank == 0 && !big)) {
		fprintf(stderr, "mpi_coll: out of memory at %ld bytes\n", bytes);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(small, rank + 1, bytes);
	if (big)
		memset(big, 0x5a, bytes * size);
	for (int i = -2; i < iters; i++) {
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();
		if (gather)
			MPI_Gather(small, bytes, MPI_BYTE, big, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
		else
			MPI_Scatter(big, bytes, MPI_BYTE, small, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
		double t = MPI_Wtime() - t0, slowest;
		MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		if (i >= 0 && rank == 0) {
			sum += slowest;
			lo = slowest < lo ? slowest : lo;
			hi = slowest > hi ? slowest : hi;
		}
	}
	if (rank == 0)
		printf("%s %ld %.2f %.2f %.2f\n", name, bytes, sum / iters * 1e6, lo * 1e6, hi * 1e6);
	free(small);
	free(big);
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 5;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (iters < 1)
		iters = 1;
	for (int a = 2; a < argc || a == 2; a++) {
		long bytes = a < argc ? atol(argv[a]) : 65536;
		run("gather", 1, bytes, iters, rank, size);
		run("scatter", 0, bytes, iters, rank, size);
	}
	MPI_Finalize();
	return 0;
}
