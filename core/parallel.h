// CPU threading: OpenMP when the build has it, else serial. Work below the grain runs on the
// calling thread (thread start-up costs more than a few thousand elements of arithmetic).
#pragma once

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tg {

inline constexpr int64_t kParallelGrain = 32768;

void set_num_threads(int n);
int get_num_threads();

// Calls f(begin, end) over disjoint chunks of [begin, end) of at least `grain` items each.
template <class F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
#ifdef _OPENMP
  int threads = static_cast<int>(std::min<int64_t>(get_num_threads(), (n + grain - 1) / grain));
  if (threads > 1 && !omp_in_parallel()) {
#pragma omp parallel num_threads(threads)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t chunk = (n + nt - 1) / nt;
      int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
      if (b < e) f(b, e);
    }
    return;
  }
#endif
  (void)grain;
  f(begin, end);
}

}  // namespace tg
