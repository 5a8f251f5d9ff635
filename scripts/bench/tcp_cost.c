/*
 * tcp_cost.c - what moving one byte over plain TCP on loopback costs this machine in CPU, at
 * both ends together, with no gRPC, no framing and no protocol: the floor under any TCP
 * transport of a ring all-reduce here.
 *
 *   build/bench/tcp_cost [--sizes 256K,512K,1M,4M] [--bytes N] [--repeat K] [--json]
 *
 * Per message size, a child process writes N bytes (default 1 GiB) in messages of that size
 * from one buffer; the parent reads them into one buffer, twice: once only reading ("copy":
 * what an all-gather step must do at least) and once adding every received message into a
 * float array as a reduce-scatter step does ("reduce"). CPU is user + system time of both
 * processes (getrusage), so it counts the kernel's copies and the TCP stack on both sides.
 * A ring all-reduce moves half its bytes in each kind of step, so the floor per byte sent is
 * the mean of the two, taken at the cheapest message size. Each figure is the cheapest of K
 * transfers (default 3): a floor should not carry the neighbours' noise.
 *
 * Output: a table, or with --json {"rows": [{"bytes", "copy_ns_per_byte", "reduce_ns_per_byte",
 * "copy_GBps", "reduce_GBps"}], "ring_floor_ns_per_byte"}.
 * Every wait is bounded: the child is killed if the transfer runs past 60 s.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZES  16
#define DEADLINE_S 60

typedef struct result {
    double ns_per_byte, gbps;
} result;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_s(int who)
{
    struct rusage r;
    getrusage(who, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    switch (*end) {
    case 'K':
    case 'k':
        v <<= 10;
        end++;
        break;
    case 'M':
    case 'm':
        v <<= 20;
        end++;
        break;
    case 'G':
    case 'g':
        v <<= 30;
        end++;
        break;
    default:
        break;
    }
    if (*end || v == 0 || v > (1ull << 30))
        return -1;
    *out = (size_t)v;
    return 0;
}

static void sender(const struct sockaddr_in *a, size_t msg, size_t total)
{
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (s < 0 || connect(s, (const struct sockaddr *)a, sizeof *a) != 0)
        _exit(1);
    char *b = malloc(msg);
    if (!b)
        _exit(1);
    memset(b, 1, msg);
    for (size_t sent = 0; sent < total;) {
        ssize_t w = write(s, b, msg);
        if (w <= 0)
            _exit(1);
        sent += (size_t)w;
    }
    close(s);
    _exit(0);
}

/* One transfer of total bytes in messages of msg bytes; reduce: add each message into floats. */
static int measure(size_t msg, size_t total, int reduce, result *out)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&a, &al) != 0) {
        fprintf(stderr, "tcp_cost: cannot listen on loopback: %s\n", strerror(errno));
        return -1;
    }
    double child0 = cpu_s(RUSAGE_CHILDREN);
    pid_t p = fork();
    if (p < 0)
        return -1;
    if (p == 0) {
        alarm(DEADLINE_S);
        sender(&a, msg, total);
    }
    struct timeval tv = {.tv_sec = DEADLINE_S};
    setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int c = accept(l, NULL, NULL);
    char *b = malloc(msg);
    float *d = calloc(msg / 4 + 1, sizeof *d);
    size_t got = 0, off = 0;
    double t0 = now_s(), c0 = cpu_s(RUSAGE_SELF);
    if (c >= 0 && b && d) {
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        for (;;) {
            ssize_t r = read(c, b + off, msg - off);
            if (r <= 0)
                break;
            got += (size_t)r;
            off += (size_t)r;
            if (off < msg)
                continue;
            off = 0;
            if (reduce) {
                const float *f = (const float *)(void *)b;
                for (size_t i = 0; i < msg / 4; i++)
                    d[i] += f[i];
            }
        }
    }
    double t1 = now_s(), c1 = cpu_s(RUSAGE_SELF);
    int st = 0;
    kill(p, got == total ? 0 : SIGKILL);
    waitpid(p, &st, 0);
    double cc = cpu_s(RUSAGE_CHILDREN) - child0;
    if (c >= 0)
        close(c);
    close(l);
    volatile float sink = d ? d[0] : 0; /* the reduce must not be optimised away */
    (void)sink;
    free(b);
    free(d);
    if (got != total || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "tcp_cost: transfer of %zu-byte messages ended after %zu of %zu bytes\n",
                msg, got, total);
        return -1;
    }
    out->ns_per_byte = (c1 - c0 + cc) / (double)got * 1e9;
    out->gbps = (double)got / (t1 - t0) / 1e9;
    return 0;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES], nsizes = 0, total = (size_t)1 << 30;
    int json = 0, repeat = 3;
    const char *list = "256K,512K,1M,4M";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc)
            list = argv[++i];
        else if (strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], &total) != 0) {
                fprintf(stderr, "tcp_cost: --bytes: expected a size up to 1G, got %s\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
            repeat = atoi(argv[++i]);
            if (repeat < 1 || repeat > 100) {
                fprintf(stderr, "tcp_cost: --repeat: expected 1 to 100, got %s\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--json") == 0)
            json = 1;
        else {
            fprintf(
                stderr,
                "usage: tcp_cost [--sizes 256K,512K,1M,4M] [--bytes N] [--repeat K] [--json]\n");
            return 2;
        }
    }
    char *copy = strdup(list);
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (nsizes == MAX_SIZES || parse_size(t, &sizes[nsizes]) != 0 || sizes[nsizes] % 4) {
            fprintf(stderr,
                    "tcp_cost: --sizes: expected up to %d sizes, multiples of 4 bytes, "
                    "got %s\n",
                    MAX_SIZES, t);
            return 2;
        }
        nsizes++;
    }
    free(copy);
    result rc[MAX_SIZES], rr[MAX_SIZES];
    double floor = 0;
    for (size_t i = 0; i < nsizes; i++) {
        size_t n = total / sizes[i] * sizes[i];
        for (int k = 0; k < repeat; k++) {
            result c, r;
            if (measure(sizes[i], n, 0, &c) != 0 || measure(sizes[i], n, 1, &r) != 0)
                return 1;
            if (k == 0 || c.ns_per_byte < rc[i].ns_per_byte)
                rc[i] = c;
            if (k == 0 || r.ns_per_byte < rr[i].ns_per_byte)
                rr[i] = r;
        }
        double ring = (rc[i].ns_per_byte + rr[i].ns_per_byte) / 2;
        if (i == 0 || ring < floor)
            floor = ring;
    }
    if (json) {
        printf("{\"rows\": [");
        for (size_t i = 0; i < nsizes; i++)
            printf("%s{\"bytes\": %zu, \"copy_ns_per_byte\": %.4f, \"reduce_ns_per_byte\": %.4f, "
                   "\"copy_GBps\": %.3f, \"reduce_GBps\": %.3f}",
                   i ? ", " : "", sizes[i], rc[i].ns_per_byte, rr[i].ns_per_byte, rc[i].gbps,
                   rr[i].gbps);
        printf("], \"ring_floor_ns_per_byte\": %.4f}\n", floor);
        return 0;
    }
    printf("%-10s %12s %12s %10s %10s\n", "message", "copy ns/B", "reduce ns/B", "copy GB/s",
           "reduce GB/s");
    for (size_t i = 0; i < nsizes; i++)
        printf("%-10zu %12.3f %12.3f %10.2f %10.2f\n", sizes[i], rc[i].ns_per_byte,
               rr[i].ns_per_byte, rc[i].gbps, rr[i].gbps);
    printf("ring floor (half the bytes reduced, cheapest size): %.3f ns a byte sent\n", floor);
    return 0;
}
