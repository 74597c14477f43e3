/* How long one spin-wait hint (x86 PAUSE, Arm YIELD) takes on this CPU: libgomp's idle threads
   spin GOMP_SPINCOUNT of them before they sleep, so a spin of a given time is a count that
   differs by CPU (~24 ns a PAUSE on AMD Zen 5, ~10 on the Intel Xeon with AMX). Built on its
   own, without OpenMP, so that a process can read it before torch loads libgomp (which reads
   GOMP_SPINCOUNT once). */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

static inline void spin_hint(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause" ::: "memory");
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* The fewest nanoseconds a hint took over `rounds` runs of `hints` hints (the least disturbed
   round: a preemption only lengthens one); -1 where this CPU has no spin-wait hint. */
double minisgl_spin_hint_ns(int hints, int rounds) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    double best = -1.0;
    for (int r = 0; r < rounds; r++) {
        double start = now_ns();
        for (int i = 0; i < hints; i++) spin_hint();
        double each = (now_ns() - start) / (double)hints;
        if (best < 0.0 || each < best) best = each;
    }
    return best;
#else
    (void)hints;
    (void)rounds;
    return -1.0;
#endif
}
