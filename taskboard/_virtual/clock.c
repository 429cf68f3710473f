/* taskboard's virtual clock: an LD_PRELOAD library that puts a process's wall clock on the
 * checker's clock (Linux only).
 *
 * clock_gettime(CLOCK_REALTIME and CLOCK_REALTIME_COARSE), gettimeofday and time read the
 * time from a file of 8 bytes, a signed 64-bit count of microseconds since the Unix epoch in
 * the machine's byte order, mapped shared from the path in TASKBOARD_VIRTUAL_CLOCK_FILE. The
 * checker writes the file; every read here sees its latest write, with no system call.
 *
 * Every other clock passes to the real functions: CLOCK_MONOTONIC in particular, which
 * redis-server's event loop runs its timers on (moving it would fire them all at once).
 *
 * Until the file is mapped (and when the variable is unset, or the file cannot be mapped),
 * every clock is the real one. The real functions are looked up with dlsym(RTLD_NEXT) on
 * first use; a clock read made while that lookup runs (an allocator that reads the clock
 * while dlsym allocates: jemalloc does) is answered by the system call itself, so the
 * lookup never recurses into itself.
 *
 * TASKBOARD_VIRTUAL_LIFELINE_FD, when set, names the read end of a pipe whose write end only
 * the checker's process holds: a thread waits on it, and when it reads end-of-file (the
 * checker ended, whether it exited or was killed) the process sends itself SIGTERM, so a
 * server never outlives the run that started it. TASKBOARD_VIRTUAL_LIFELINE_SIGNAL, when set,
 * names another signal to send (a number): PostgreSQL's SIGTERM is a "smart" shutdown that
 * waits for its clients, so it is sent SIGINT, the fast one.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
typedef int (*gettimeofday_fn)(struct timeval *, void *);

static volatile int64_t *virtual_micros; /* NULL: not mapped, the real clock */
static clock_gettime_fn real_clock_gettime;
static gettimeofday_fn real_gettimeofday;
static int resolving; /* a dlsym lookup is under way in some thread */

static int lifeline_signal = SIGTERM;

static void *watch_lifeline(void *arg) {
    int fd = (int)(intptr_t)arg;
    char byte;
    for (;;) {
        ssize_t got = read(fd, &byte, 1);
        if (got == 0 || (got < 0 && errno != EINTR)) break;
    }
    kill(getpid(), lifeline_signal);
    return NULL;
}

static void hold_lifeline(void) {
    const char *text = getenv("TASKBOARD_VIRTUAL_LIFELINE_FD");
    if (text == NULL || *text == '\0') return;
    char *end;
    long fd = strtol(text, &end, 10);
    if (*end != '\0' || fd < 0) return;
    const char *signal_text = getenv("TASKBOARD_VIRTUAL_LIFELINE_SIGNAL");
    if (signal_text != NULL && *signal_text != '\0') {
        long number = strtol(signal_text, &end, 10);
        if (*end == '\0' && number > 0 && number < NSIG) lifeline_signal = (int)number;
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, watch_lifeline, (void *)(intptr_t)fd) == 0)
        pthread_detach(thread);
}

__attribute__((constructor)) static void map_virtual_clock(void) {
    hold_lifeline();
    const char *path = getenv("TASKBOARD_VIRTUAL_CLOCK_FILE");
    if (path == NULL || *path == '\0') return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    void *mapped = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (mapped != MAP_FAILED) __atomic_store_n(&virtual_micros, (int64_t *)mapped, __ATOMIC_RELEASE);
}

/* The virtual time in microseconds into *out: 1 when the clock is virtual, 0 when real. */
static int read_virtual(int64_t *out) {
    volatile int64_t *mapped = __atomic_load_n(&virtual_micros, __ATOMIC_ACQUIRE);
    if (mapped == NULL) return 0;
    *out = __atomic_load_n(mapped, __ATOMIC_ACQUIRE);
    return 1;
}

static int is_realtime(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

static int call_real_clock_gettime(clockid_t id, struct timespec *ts) {
    clock_gettime_fn real = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
    if (real == NULL && !__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL)) {
        real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        __atomic_store_n(&real_clock_gettime, real, __ATOMIC_RELEASE);
        __atomic_store_n(&resolving, 0, __ATOMIC_RELEASE);
    }
    if (real == NULL) return (int)syscall(SYS_clock_gettime, id, ts);
    return real(id, ts);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int64_t micros;
    if (is_realtime(id) && read_virtual(&micros)) {
        int64_t seconds = micros / 1000000, rest = micros % 1000000;
        if (rest < 0) { seconds -= 1; rest += 1000000; }
        ts->tv_sec = (time_t)seconds;
        ts->tv_nsec = (long)(rest * 1000);
        return 0;
    }
    return call_real_clock_gettime(id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    int64_t micros;
    if (tz == NULL && read_virtual(&micros)) {
        int64_t seconds = micros / 1000000, rest = micros % 1000000;
        if (rest < 0) { seconds -= 1; rest += 1000000; }
        tv->tv_sec = (time_t)seconds;
        tv->tv_usec = (suseconds_t)rest;
        return 0;
    }
    gettimeofday_fn real = __atomic_load_n(&real_gettimeofday, __ATOMIC_ACQUIRE);
    if (real == NULL && !__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL)) {
        real = (gettimeofday_fn)dlsym(RTLD_NEXT, "gettimeofday");
        __atomic_store_n(&real_gettimeofday, real, __ATOMIC_RELEASE);
        __atomic_store_n(&resolving, 0, __ATOMIC_RELEASE);
    }
    if (real == NULL) return (int)syscall(SYS_gettimeofday, tv, tz);
    return real(tv, tz);
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
