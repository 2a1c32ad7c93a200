// Where from_pretrained's CPU time goes (issue 34): reading a file that sits in the page cache into
// (1) fresh 4 KiB pages, (2) fresh pages advised MADV_HUGEPAGE, (3) pages touched before (the read
// alone), and (4) mapping it with MAP_POPULATE (no copy), each with `threads` readers in 8 MiB
// pieces as FileReader reads. The gap between (1) and (3) is the first-touch cost of the model's
// memory; whether (2) closes it decides MADV_HUGEPAGE for large host allocations. Issue 47 (a
// mapping follows the file, so the model must own its pages): (5) fresh pages populated in one
// call (MAP_POPULATE), then read into; (6) the file mapped privately and every page copied by
// MADV_POPULATE_WRITE (Linux 5.14); (7) the file copied by the kernel into a memfd (sendfile, one
// thread), mapped shared and populated: io::File::copy_to_memory. A fourth argument runs one way
// alone (fresh, huge, touched, map, populated, private_copy, memfd), so that none reuses the pages
// another freed.
//   g++ -O2 -std=c++20 dev/load/fault_probe.cpp -o fault_probe -lpthread && ./fault_probe <file> [threads] [way]
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void read_into(int fd, char* p, size_t n, int threads) {
  constexpr size_t kPiece = 8 << 20;
  const size_t pieces = (n + kPiece - 1) / kPiece;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (size_t k = static_cast<size_t>(t); k < pieces; k += static_cast<size_t>(threads)) {
        size_t at = k * kPiece, len = std::min(kPiece, n - at);
        while (len > 0) {
          const ssize_t got = pread(fd, p + at, len, static_cast<off_t>(at));
          if (got <= 0) std::abort();
          at += static_cast<size_t>(got), len -= static_cast<size_t>(got);
        }
      }
    });
  for (auto& t : ts) t.join();
}

char* fresh(size_t n, bool huge) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  if (huge) madvise(p, n, MADV_HUGEPAGE);
  return static_cast<char*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: fault_probe <file> [threads] [way]\n"), 2;
  const int threads = argc > 2 ? std::atoi(argv[2]) : static_cast<int>(std::thread::hardware_concurrency());
  const std::string only = argc > 3 ? argv[3] : "";
  const int fd = open(argv[1], O_RDONLY);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return std::perror(argv[1]), 1;
  const size_t n = static_cast<size_t>(st.st_size);
  char* warm = fresh(n, false);
  if (only.empty() || only == "touched") read_into(fd, warm, n, threads);  // the page cache warm, pages to reuse
  auto row = [&](const char* what, double s) {
    std::printf("%-34s %8.3f s %7.2f GB/s\n", what, s, static_cast<double>(n) / 1e9 / s);
  };
  auto run = [&](const char* way) { return only.empty() || only == way; };
  std::printf("%s: %.3f GB, %d threads\n", argv[1], static_cast<double>(n) / 1e9, threads);
  for (bool huge : {false, true}) {
    if (!run(huge ? "huge" : "fresh")) continue;
    char* p = fresh(n, huge);
    const double t0 = now();
    read_into(fd, p, n, threads);
    row(huge ? "read into fresh MADV_HUGEPAGE pages" : "read into fresh 4 KiB pages", now() - t0);
    munmap(p, n);
  }
  double t0 = now();
  if (run("touched")) {
    read_into(fd, warm, n, threads);
    row("read into touched pages", now() - t0);
  }
  if (run("map")) {
    t0 = now();
    void* m = mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    row("mmap MAP_POPULATE (no copy)", now() - t0);
    if (m != MAP_FAILED) munmap(m, n);
  }
  if (run("populated")) {
    t0 = now();
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    read_into(fd, static_cast<char*>(p), n, threads);
    row("populate fresh pages, then read", now() - t0);
    munmap(p, n);
  }
  if (run("private_copy")) {
    t0 = now();
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) std::abort();
    constexpr size_t kRange = size_t{64} << 20;
    std::vector<std::thread> ts;
    bool ok = true;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        for (size_t at = static_cast<size_t>(t) * kRange; at < n; at += static_cast<size_t>(threads) * kRange)
          if (madvise(static_cast<char*>(p) + at, std::min(kRange, n - at), MADV_POPULATE_WRITE) != 0) ok = false;
      });
    for (auto& t : ts) t.join();
    row(ok ? "private map, MADV_POPULATE_WRITE" : "private map, MADV_POPULATE_WRITE refused", now() - t0);
    munmap(p, n);
  }
  if (run("memfd")) {
    t0 = now();
    const int mem = memfd_create("probe", MFD_CLOEXEC);
    if (mem < 0 || ftruncate(mem, static_cast<off_t>(n)) != 0) std::abort();
    off_t in = 0;
    for (size_t left = n; left > 0;) {
      const ssize_t got = sendfile(mem, fd, &in, left);
      if (got <= 0) std::abort();
      left -= static_cast<size_t>(got);
    }
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mem, 0);
    if (p == MAP_FAILED) std::abort();
    row("sendfile into a memfd, mapped", now() - t0);
    munmap(p, n);
    close(mem);
  }
  std::FILE* thp = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char mode[128] = "?";
  if (thp && std::fgets(mode, sizeof mode, thp)) std::printf("transparent_hugepage: %s", mode);
  if (thp) std::fclose(thp);
}
