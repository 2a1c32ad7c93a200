#include "core/parallel.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#ifdef __linux__
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TG_CPU_RELAX() _mm_pause()
#else
#define TG_CPU_RELAX() ((void)0)
#endif

#include "core/error.h"

namespace tg {
namespace {

int default_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    // The whole text a count (io/number.h's rule; core lies below io): "4abc" or 2^32 is not 4.
    // OpenMP's nested list ("4,2") gives the outer level.
    std::string_view text(env);
    text = text.substr(0, text.find(','));
    int n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec == std::errc() && end == text.data() + text.size() && n >= 1) return n;
  }
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::atomic<int> g_threads{0};  // 0: not decided yet
thread_local bool t_in_region = false;

// One job at a time (a second calling thread waits on `run_mu`). `generation` is odd while a job
// is open; a worker joins a job by raising `active` and then checking the generation is still
// that job's, and the caller closes a job (even generation) and waits for `active` to drop to 0
// before the job's fields may change: a late worker never reads a finished job.
struct Pool {
  std::mutex run_mu;
  std::mutex grow_mu;
  std::vector<std::thread> workers;
  std::atomic<uint32_t> generation{0};  // 32 bits: a futex word, so waiting sleeps in the kernel
  std::atomic<int> active{0};
  void (*body)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  int64_t chunks = 0;
  std::atomic<int64_t> next{0}, done{0};
  std::mutex error_mu;
  std::exception_ptr error;

  // Claims and runs chunks of the open job until none is left.
  void work() {
    const bool outer = t_in_region;
    t_in_region = true;
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      try {
        body(ctx, i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_release);
    }
    t_in_region = outer;
  }

  void worker_loop() {
    uint32_t seen = generation.load(std::memory_order_acquire);
    for (;;) {
      // Wait for a job this thread has not seen: spin ~200 us (the ops of a step arrive
      // microseconds apart), then sleep until the generation changes.
      uint32_t g = generation.load(std::memory_order_acquire);
      auto ready = [&] { return (g & 1) && g != seen; };
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      for (uint32_t spins = 1; !ready(); ++spins) {
        if ((spins & 255) || std::chrono::steady_clock::now() < until) TG_CPU_RELAX();
        else generation.wait(g, std::memory_order_acquire);
        g = generation.load(std::memory_order_acquire);
      }
      seen = g;
      active.fetch_add(1, std::memory_order_seq_cst);
      if (generation.load(std::memory_order_seq_cst) == g) work();
      active.fetch_sub(1, std::memory_order_release);
    }
  }

  void ensure_workers(int n) {
    std::lock_guard<std::mutex> lock(grow_mu);
    while (static_cast<int>(workers.size()) < n) workers.emplace_back([this] { worker_loop(); });
  }

  // Waits for `done` to reach the job's chunk count, yielding the core now and then: under
  // contention the worker that holds the last chunk may need this very core to finish it.
  template <class Pred>
  static void wait_until(Pred ready) {
    for (int spins = 0; !ready(); ++spins) {
      if (spins < 4096) TG_CPU_RELAX();
      else std::this_thread::yield();
    }
  }

  void run(int64_t n, void (*b)(void*, int64_t), void* c, int threads) {
    ensure_workers(threads - 1);
    std::lock_guard<std::mutex> lock(run_mu);
    body = b, ctx = c, chunks = n;
    next.store(0, std::memory_order_relaxed);
    done.store(0, std::memory_order_relaxed);
    error = nullptr;
    const uint32_t g = generation.load(std::memory_order_relaxed) + 1;  // odd: open
    generation.store(g, std::memory_order_release);
    generation.notify_all();
    work();
    wait_until([&] { return done.load(std::memory_order_acquire) == chunks; });
    generation.store(g + 1, std::memory_order_seq_cst);  // even: closed
    wait_until([&] { return active.load(std::memory_order_seq_cst) == 0; });
    if (error) std::rethrow_exception(error);
  }
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: its workers live until the process ends
  return *p;
}

}  // namespace

void set_num_threads(int n) {
  TG_CHECK(n >= 1, "set_num_threads", "wants at least 1 thread, got ", n);
  g_threads.store(n, std::memory_order_relaxed);
}

int get_num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = default_threads();
    int expected = 0;
    if (!g_threads.compare_exchange_strong(expected, n)) n = expected;
  }
  return n;
}

namespace detail {

bool in_parallel_region() { return t_in_region; }

void run_chunks(int64_t chunks, void (*body)(void* ctx, int64_t chunk), void* ctx) {
  pool().run(chunks, body, ctx, get_num_threads());
}

}  // namespace detail
}  // namespace tg
