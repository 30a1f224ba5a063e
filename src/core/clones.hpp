// Per-CPU clones of a hot loop: GCC's target_clones builds an AVX2 and a baseline version and an ifunc
// resolver picks one once, at load time. Under ThreadSanitizer that resolver runs instrumented before
// TSan's runtime is up and the binary dies while loading, so a TSan build gets the baseline alone.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define PSTWIN_AVX2_CLONES
#else
#define PSTWIN_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#endif
