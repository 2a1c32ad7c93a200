#include "core/parallel.h"

#include "core/error.h"

namespace tg {

void set_num_threads(int n) {
  TG_CHECK(n >= 1, "set_num_threads", "wants at least 1 thread, got ", n);
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
}

int get_num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace tg
