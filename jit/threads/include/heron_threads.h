/* heron_threads.h: threads for Heron's ahead-of-time compiled models.
 *
 * An object compiled by `heron compile` exports heron_<name>_run_ctx(inputs, outputs,
 * workspaces, parameters, context): heron_<name>_run plus a run context, which splits the
 * model's parallel loops across a thread pool. Results are bit-identical to heron_<name>_run
 * (each output element is computed by one thread, in the same order). A NULL context runs
 * everything on the calling thread.
 *
 *   HeronThreads *pool = heron_threads_new(2);      // the caller + 1 worker
 *   int32_t rc = heron_mymodel_run_ctx(&in, &out, &ws, NULL, heron_threads_context(pool));
 *   heron_threads_free(pool);
 *
 * Link: cc prog.c mymodel.o libheron_threads.a -lpthread -ldl -lm
 * (libheron_threads.a is built by `cargo build --release -p heron-threads` into target/release/).
 *
 * The library also carries Heron's precompiled CPU kernels (AVX-512 / AVX2, chosen from CPUID),
 * and a pool's context lists them: an object compiled with `heron compile --kernels` calls
 * them through it, so it runs only through heron_<name>_run_ctx with a pool's context (any
 * thread count; without one it returns HERON_ERROR_CONTEXT).
 *
 * One pool serves one run at a time: threads running models concurrently need a pool each. */
#ifndef HERON_THREADS_H
#define HERON_THREADS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct HeronThreads HeronThreads;
typedef struct HeronRunContext HeronRunContext;

/* A pool of `threads` threads in all (0 counts as 1); NULL if a thread cannot start. On Linux
 * the workers keep to the CPUs the calling thread may use other than the one it runs on now
 * (so no worker is woken onto it and left there); a pool with more threads than CPUs yields
 * while waiting instead of spinning. */
HeronThreads *heron_threads_new(size_t threads);
/* The context for heron_<name>_run_ctx, valid until the pool is freed; NULL for NULL. */
const HeronRunContext *heron_threads_context(const HeronThreads *pool);
/* Stops and joins the workers; NULL is a no-op. No run may be using the pool. */
void heron_threads_free(HeronThreads *pool);

#ifdef __cplusplus
}
#endif

#endif
