// CPU threading: a small pool of worker threads (the caller works too). Work below the grain runs
// on the calling thread (thread start-up costs more than a few thousand elements of arithmetic).
//
// Why not an OpenMP parallel region: on a machine whose cores other processes also use, a
// worker is often descheduled for a whole time slice (~4 ms), and an OpenMP region cannot end
// before every thread of the team has passed its barrier, so each of the hundreds of regions in
// a training step could wait a slice. Here the chunks of a call are claimed from a shared
// counter: the caller runs whatever chunks no worker has started and returns once those that
// were started are done, so a sleeping worker delays nothing it has not begun.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace tg {

inline constexpr int64_t kParallelGrain = 32768;

// The threads parallel_for may use, the caller included (default: OMP_NUM_THREADS, else the
// CPUs this process may run on).
void set_num_threads(int n);
int get_num_threads();

namespace detail {
// Calls body(ctx, i) once for every i in [0, chunks), on the pool and the calling thread, and
// returns when all calls have returned (rethrowing the first exception one of them threw).
void run_chunks(int64_t chunks, void (*body)(void* ctx, int64_t chunk), void* ctx);
// True on a thread that is running a chunk: a nested parallel_for runs serially there.
bool in_parallel_region();
}  // namespace detail

// Calls f(begin, end) over disjoint chunks of [begin, end) of at least `grain` items each: one
// chunk per thread, with boundaries that depend only on the range, the grain and the thread
// count (never on which thread runs a chunk), so results are reproducible run to run.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int64_t threads = std::min<int64_t>(get_num_threads(), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (threads <= 1 || detail::in_parallel_region()) {
    f(begin, end);
    return;
  }
  struct Ctx {
    std::remove_reference_t<F>* f;
    int64_t begin, end, chunk;
  } ctx{&f, begin, end, (n + threads - 1) / threads};
  detail::run_chunks(
      threads,
      [](void* c, int64_t i) {
        const Ctx& x = *static_cast<const Ctx*>(c);
        const int64_t b = x.begin + i * x.chunk, e = std::min(x.end, b + x.chunk);
        if (b < e) (*x.f)(b, e);
      },
      &ctx);
}

}  // namespace tg
