/* mpi_allreduce - the OpenMPI peer of `dtrain bench allreduce`: MPI_Allreduce of float32 sums,
 * timed the way nccl-tests times them, printing the same JSON as dtrain's bench.
 *
 *   mpirun -np R build/bench/mpi_allreduce [--sizes 4K,64K,1M] [--iters N] [--warmup W]
 *                                          [--budget S] [--warmup-s S] [--json]
 *
 * For each size: W warm-up calls (with --warmup-s, more until S seconds have passed, in batches
 * rank 0 sizes by the previous batch's pace and broadcasts), then rank 0 turns the warm-up time
 * into an iteration count (at most N, at least 3, about S seconds in all) and broadcasts it, so a
 * 64 MB size on a slow link does not take minutes; then a barrier and that many back-to-back
 * calls. time_s is the mean time of one call, the slowest rank's (MPI_MAX), algbw = bytes /
 * time_s, busbw = algbw * 2(R-1)/R.
 * cpu_s is the CPU time (every thread, user and system) of one call, the mean over ranks.
 * Before timing, one call on known data (rank r sends r+1 everywhere) checks the sum on every rank.
 * Rank 0 prints; the other ranks print nothing. Exit 1 on a wrong sum, 2 on bad arguments.
 * Build: mpicc -O2 -std=c11 -o build/bench/mpi_allreduce scripts/bench/mpi_allreduce.c -lm */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 32

/* CPU time of this process (every thread, user and system), seconds. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "4K" -> 4096, "1M" -> 1048576, "512" -> 512; 0 on a malformed value. */
static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    switch (*end) {
    case 'k':
    case 'K':
        v <<= 10, end++;
        break;
    case 'm':
    case 'M':
        v <<= 20, end++;
        break;
    case 'g':
    case 'G':
        v <<= 30, end++;
        break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    return *end ? 0 : (size_t)v;
}

static int usage(int rank)
{
    if (rank == 0)
        fprintf(stderr, "usage: mpi_allreduce [--sizes 4K,64K,1M,...] [--iters N] [--warmup W] "
                        "[--budget SECONDS] [--warmup-s SECONDS] [--json]\n");
    return 2;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    size_t sizes[MAX_SIZES];
    int nsizes = 0, iters = 20, warmup = 3, json = 0, rc = 0;
    double budget = 3.0, warmup_s = 0;
    const char *size_list = "4K,64K,1M,4M,16M,64M";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (!v) {
            rc = usage(rank);
            break;
        }
        if (!strcmp(a, "--sizes"))
            size_list = v;
        else if (!strcmp(a, "--iters"))
            iters = atoi(v);
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(v);
        else if (!strcmp(a, "--budget"))
            budget = atof(v);
        else if (!strcmp(a, "--warmup-s"))
            warmup_s = atof(v);
        else {
            rc = usage(rank);
            break;
        }
        i++;
    }
    char *list = strdup(size_list);
    for (char *save, *tok = strtok_r(list, ",", &save); !rc && tok;
         tok = strtok_r(NULL, ",", &save)) {
        size_t b = parse_size(tok);
        if (!b || b % 4 || nsizes == MAX_SIZES) {
            if (rank == 0)
                fprintf(stderr,
                        "mpi_allreduce: size '%s' is not a positive multiple of 4 bytes "
                        "(or more than %d sizes)\n",
                        tok, MAX_SIZES);
            rc = 2;
        } else {
            sizes[nsizes++] = b;
        }
    }
    free(list);
    if (!rc && (iters < 1 || warmup < 1 || budget <= 0 || !(warmup_s >= 0 && warmup_s <= 60)))
        rc = usage(rank);
    if (rc) {
        MPI_Finalize();
        return rc;
    }

    if (rank == 0 && json)
        printf("{\"world_size\": %d, \"rows\": [", world);
    else if (rank == 0)
        printf("%12s %8s %12s %12s %12s %12s\n", "bytes", "iters", "time_us", "algbw_GBps",
               "busbw_GBps", "cpu_us");
    for (int s = 0; s < nsizes && !rc; s++) {
        size_t n = sizes[s] / 4;
        float *send = malloc(n * sizeof(float)), *recv = malloc(n * sizeof(float));
        if (!send || !recv) {
            fprintf(stderr, "mpi_allreduce: rank %d: out of memory for %zu bytes\n", rank,
                    sizes[s]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (size_t i = 0; i < n; i++)
            send[i] = (float)(rank + 1);
        MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        float want = (float)world * (world + 1) / 2;
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            bad |= recv[i] != want;
        MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        if (bad) {
            if (rank == 0)
                fprintf(stderr, "mpi_allreduce: wrong sum at %zu bytes\n", sizes[s]);
            rc = 1;
        }
        double t0 = MPI_Wtime(), tb = t0;
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double per = (MPI_Wtime() - t0) / warmup;
        /* --warmup-s: more untimed calls until S seconds, in batches sized by the previous
         * batch's pace (the first calls are the slow ones), counted on rank 0 for all */
        for (int batch = warmup, more = 1; more > 0; batch = more) {
            double now = MPI_Wtime(), spent = now - t0, pace = (now - tb) / batch;
            more = spent < warmup_s ? (int)ceil((warmup_s - spent) / (pace > 0 ? pace : 1e-6)) : 0;
            more = more > 100000 ? 100000 : more;
            MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
            tb = MPI_Wtime();
            for (int i = 0; i < more; i++)
                MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        int it = per > 0 ? (int)(budget / per) : iters;
        it = it > iters ? iters : it < 3 ? 3 : it;
        MPI_Bcast(&it, 1, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double c0 = cpu_s();
        t0 = MPI_Wtime();
        for (int i = 0; i < it; i++)
            MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / it, cpu = (cpu_s() - c0) / it;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &cpu, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        cpu /= world;
        double alg = sizes[s] / t / 1e9, bus = alg * 2.0 * (world - 1) / world;
        if (rank == 0 && json)
            printf("%s{\"bytes\": %zu, \"iters\": %d, \"time_s\": %.9f, \"algbw_GBps\": %.6f, "
                   "\"busbw_GBps\": %.6f, \"cpu_s\": %.9f}",
                   s ? ", " : "", sizes[s], it, t, alg, bus, cpu);
        else if (rank == 0)
            printf("%12zu %8d %12.1f %12.4f %12.4f %12.1f\n", sizes[s], it, t * 1e6, alg, bus,
                   cpu * 1e6);
        fflush(stdout);
        free(send);
        free(recv);
    }
    if (rank == 0 && json)
        printf("]}\n");
    MPI_Finalize();
    return rc;
}
