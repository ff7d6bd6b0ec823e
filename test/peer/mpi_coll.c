/*
 * mpi_coll: times Open MPI's collectives the way ibcoll-perf times ibcoll's,
 * so that scripts/bench-mpi.sh can put the two side by side:
 *  - per size, the ranks line up once (a barrier), then run the warm-up and
 *    the timed iterations back to back, each rank timing each iteration;
 *  - an iteration's time is the slowest rank's; the line reports the average,
 *    minimum, maximum and median of those over the timed iterations (the
 *    median, because a few descheduled iterations set the average on a shared
 *    or emulated machine);
 *  - sizes mean what ibcoll-perf's -b/-e mean: the block one rank contributes
 *    (gather) or receives (scatter), the whole vector for bcast and allreduce
 *    (int32, sum: Open MPI 4.1.4's AVX int8 sum saturates instead of wrapping,
 *    which the check below caught, so bench-mpi.sh runs ibcoll-perf -d int32
 *    too). Sizes are multiples of 4.
 * The last iteration's result is checked against data drawn from a seed, so a
 * transport that delivers garbage fails the run instead of timing it.
 *
 * usage: mpirun -np N mpi_coll [-n iters] [-w warmup] [-c coll,coll] [-s seed] size...
 * prints one line per collective and size:
 *   "<collective> <bytes> <avg_us> <min_us> <max_us> <p50_us> ok"
 * and exits 1 (after MPI_Abort) when a check fails.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { GATHER, SCATTER, BCAST, ALLREDUCE, NCOLL };
static const char *names[NCOLL] = {"gather", "scatter", "bcast", "allreduce"};

/* byte i of rank r's data for this seed and size: a cheap integer hash */
static uint8_t draw(uint64_t seed, int r, long i)
{
	uint64_t x = seed ^ ((uint64_t)r << 40) ^ (uint64_t)i;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return (uint8_t)x;
}

static void fill(uint8_t *p, long n, uint64_t seed, int r, long off)
{
	for (long i = 0; i < n; i++)
		p[i] = draw(seed, r, off + i);
}

static void die(const char *what, long bytes, int rank)
{
	fprintf(stderr, "mpi_coll: rank %d: %s at %ld bytes\n", rank, what, bytes);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

/* check reports whether this rank's result of the last iteration is right. */
static int check(int c, const uint8_t *small, const uint8_t *big, long bytes, uint64_t seed, int rank, int size)
{
	switch (c) {
	case GATHER:
		if (rank != 0)
			return 1;
		for (int r = 0; r < size; r++)
			for (long i = 0; i < bytes; i++)
				if (big[r * bytes + i] != draw(seed, r, i))
					return 0;
		return 1;
	case SCATTER: /* the root's buffer holds block r for rank r */
		for (long i = 0; i < bytes; i++)
			if (small[i] != draw(seed, 0, rank * bytes + i))
				return 0;
		return 1;
	case BCAST:
		for (long i = 0; i < bytes; i++)
			if (big[i] != draw(seed, 0, i))
				return 0;
		return 1;
	default: /* allreduce, int32 sum (wrapping, as unsigned) */
		for (long e = 0; e < bytes / 4; e++) {
			uint32_t want = 0, got;
			for (int r = 0; r < size; r++) {
				uint8_t b[4];
				for (int k = 0; k < 4; k++)
					b[k] = draw(seed, r, 4 * e + k);
				uint32_t v;
				memcpy(&v, b, 4);
				want += v;
			}
			memcpy(&got, big + 4 * e, 4);
			if (got != want)
				return 0;
		}
		return 1;
	}
}

static int cmpDouble(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void run(int c, long bytes, int iters, int warmup, uint64_t seed, int rank, int size)
{
	long bigLen = c == GATHER || c == SCATTER ? bytes * size : bytes;
	uint8_t *small = malloc(bytes), *big = malloc(bigLen);
	double *t = calloc(iters, sizeof *t), *slowest = calloc(iters, sizeof *slowest);
	if (!small || !big || !t || !slowest)
		die("out of memory", bytes, rank);
	seed ^= (uint64_t)bytes * 0x9e3779b97f4a7c15ULL ^ (uint64_t)c;
	memset(big, 0x5a, bigLen);
	switch (c) {
	case GATHER:
	case ALLREDUCE:
		fill(small, bytes, seed, rank, 0);
		break;
	case SCATTER:
		if (rank == 0)
			fill(big, bigLen, seed, 0, 0);
		break;
	}
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = -warmup; i < iters; i++) {
		if (c == BCAST && rank == 0)
			fill(big, bytes, seed, 0, 0); /* untimed: the root's vector is the source */
		double t0 = MPI_Wtime();
		switch (c) {
		case GATHER:
			MPI_Gather(small, bytes, MPI_BYTE, big, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
			break;
		case SCATTER:
			MPI_Scatter(big, bytes, MPI_BYTE, small, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
			break;
		case BCAST:
			MPI_Bcast(big, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
			break;
		default:
			MPI_Allreduce(small, big, bytes / 4, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
		}
		if (i >= 0)
			t[i] = MPI_Wtime() - t0;
	}
	int ok = check(c, small, big, bytes, seed, rank, size), allOK;
	MPI_Allreduce(&ok, &allOK, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (!ok)
		fprintf(stderr, "mpi_coll: rank %d: %s %ld bytes: wrong result\n", rank, names[c], bytes);
	if (!allOK) {
		if (rank == 0)
			printf("%s %ld - - - - FAIL\n", names[c], bytes);
		fflush(stdout);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	MPI_Reduce(t, slowest, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	if (rank == 0) {
		double sum = 0, lo = 1e30, hi = 0;
		for (int i = 0; i < iters; i++) {
			sum += slowest[i];
			lo = slowest[i] < lo ? slowest[i] : lo;
			hi = slowest[i] > hi ? slowest[i] : hi;
		}
		qsort(slowest, iters, sizeof *slowest, cmpDouble);
		double p50 = iters % 2 ? slowest[iters / 2] : (slowest[iters / 2 - 1] + slowest[iters / 2]) / 2;
		printf("%s %ld %.2f %.2f %.2f %.2f ok\n", names[c], bytes, sum / iters * 1e6, lo * 1e6, hi * 1e6, p50 * 1e6);
		fflush(stdout);
	}
	free(small);
	free(big);
	free(t);
	free(slowest);
}

static void usage(void)
{
	fprintf(stderr, "usage: mpi_coll [-n iters] [-w warmup] [-c gather,scatter,bcast,allreduce] [-s seed] size...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int rank, size, iters = 5, warmup = 2, want[NCOLL] = {1, 1, 0, 0};
	uint64_t seed = (uint64_t)time(NULL);
	long sizes[64];
	int nsizes = 0;
	for (int a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "-n") && a + 1 < argc)
			iters = atoi(argv[++a]);
		else if (!strcmp(argv[a], "-w") && a + 1 < argc)
			warmup = atoi(argv[++a]);
		else if (!strcmp(argv[a], "-s") && a + 1 < argc)
			seed = strtoull(argv[++a], NULL, 0);
		else if (!strcmp(argv[a], "-c") && a + 1 < argc) {
			char *list = argv[++a], *tok;
			memset(want, 0, sizeof want);
			for (tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
				int c;
				for (c = 0; c < NCOLL && strcmp(tok, names[c]); c++)
					;
				if (c == NCOLL) {
					fprintf(stderr, "mpi_coll: -c: unknown collective %s\n", tok);
					usage();
				}
				want[c] = 1;
			}
		} else if (argv[a][0] >= '1' && argv[a][0] <= '9' && nsizes < 64)
			sizes[nsizes++] = atol(argv[a]);
		else
			usage();
	}
	if (iters < 1 || warmup < 0 || nsizes == 0)
		usage();
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	/* every rank draws from rank 0's seed */
	MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
	/* UCX connects lazily; ibcoll's team creation wires every queue pair up
	 * front. Touch every pair here, untimed, so that neither side's timed
	 * iterations pay for connection set-up. */
	int *one = calloc(2 * size, sizeof *one);
	MPI_Alltoall(one, 1, MPI_INT, one + size, 1, MPI_INT, MPI_COMM_WORLD);
	free(one);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("# mpi_coll: %d ranks, %d iterations (+%d warm-up), seed %llu\n", size, iters, warmup,
		       (unsigned long long)seed);
	for (int c = 0; c < NCOLL; c++)
		for (int s = 0; s < nsizes && want[c]; s++)
			run(c, sizes[s], iters, warmup, seed, rank, size);
	MPI_Finalize();
	return 0;
}
