#include "core/limits.h"

#include <unistd.h>

#include "core/error.h"

namespace tg {

uint64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
}

void check_host_memory(double bytes, const char* op, const std::string& what) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double host = static_cast<double>(host_memory_bytes());
  TG_CHECK(bytes <= host, op, what, " take ", bytes / kGiB, " GiB, more than the host's ", host / kGiB,
           " GiB of memory");
}

}  // namespace tg
