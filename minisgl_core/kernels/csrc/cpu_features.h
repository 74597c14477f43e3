/* The CPU features the kernels may use: what cpuid says, narrowed by MINISGL_CPU_FEATURES.
 *
 * The variable is the mask of minisgl_core/kernels/cpu_features.py, which writes it in canonical
 * form (every implied feature listed, comma-separated) before this library loads; unset or empty,
 * every feature the CPU has may be used. A mask never adds a feature: callers still ask cpuid.
 */
#ifndef MINISGL_CPU_FEATURES_H
#define MINISGL_CPU_FEATURES_H

#include <stdlib.h>
#include <string.h>

/* 1 if ``name`` (a feature of cpu_features.FEATURES) is allowed by the mask */
static inline int cpu_feature_allowed(const char *name) {
    const char *mask = getenv("MINISGL_CPU_FEATURES");
    if (mask == NULL || *mask == '\0') return 1;
    size_t n = strlen(name);
    for (const char *p = mask; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        if (!end) break;
        p = end + 1;
    }
    return 0;
}

#endif
