// A CUPTI injection library: the GPU start and end of every kernel, memcpy and memset a CUDA
// process runs, written as CSV, so a step's timeline (each kernel's time in place, and the time
// between kernels) can be read where Nsight Systems cannot run (the GPU machine has no nsys).
// ncu times each kernel alone, with its clocks and caches to itself; this times them as they run.
//   CUDA_INJECTION64_PATH=build-gpu/bench/libtg_timeline.so TG_TIMELINE=trace.csv <program>
//   python3 bench/timeline_census.py trace.csv
// Rows: kind (kernel, memcpy, memset, mark), start ns, end ns, stream, name (demangled). A
// program's cudaProfilerStart / Stop calls are "mark" rows (start, stop) at the host time of the
// call, so the window a benchmark brackets (train_step_bench's timed steps) can be cut out. The file
// is written at each cudaProfilerStop and again at exit, whole each time.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;

struct Row {
  const char* kind;
  uint64_t start, end;
  uint32_t stream;
  std::string name;
};

std::mutex mu;
std::vector<Row> rows;
CUpti_SubscriberHandle subscriber;

bool ok(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "tg_timeline: %s failed: %s\n", what, msg ? msg : "unknown CUPTI error");
  return false;
}

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

void add(const char* kind, uint64_t start, uint64_t end, uint32_t stream, std::string name) {
  std::lock_guard<std::mutex> lock(mu);
  rows.push_back({kind, start, end, stream, std::move(name)});
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        add("kernel", k->start, k->end, k->streamId, demangle(k->name));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        add("memcpy", m->start, m->end, m->streamId, "memcpy kind " + std::to_string(m->copyKind) + " " +
                                                         std::to_string(m->bytes) + " bytes");
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        add("memset", m->start, m->end, m->streamId, "memset " + std::to_string(m->bytes) + " bytes");
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (ok(cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped), "cuptiActivityGetNumDroppedRecords") && dropped)
    std::fprintf(stderr, "tg_timeline: %zu records dropped (the buffers filled)\n", dropped);
  std::free(buffer);
}

// Flushes CUPTI's buffers and writes every row so far, in start order, to $TG_TIMELINE.
void write_rows() {
  ok(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  const char* path = std::getenv("TG_TIMELINE");
  std::lock_guard<std::mutex> lock(mu);
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.start < b.start; });
  const std::string tmp = std::string(path) + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "tg_timeline: cannot write %s\n", tmp.c_str());
    return;
  }
  std::fprintf(f, "kind,start_ns,end_ns,stream,name\n");
  for (const Row& r : rows) {
    std::string name = r.name;  // CSV: quoted, quotes doubled
    for (size_t i = 0; (i = name.find('"', i)) != std::string::npos; i += 2) name.insert(i, 1, '"');
    std::fprintf(f, "%s,%llu,%llu,%u,\"%s\"\n", r.kind, static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.stream, name.c_str());
  }
  if (std::fclose(f) != 0 || std::rename(tmp.c_str(), path) != 0)
    std::fprintf(stderr, "tg_timeline: cannot write %s\n", path);
}

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  uint64_t now = 0;
  if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000 && info->callbackSite == CUPTI_API_ENTER) {
    if (ok(cuptiGetTimestamp(&now), "cuptiGetTimestamp")) add("mark", now, now, 0, "start");
  } else if (id == CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000 && info->callbackSite == CUPTI_API_EXIT) {
    if (ok(cuptiGetTimestamp(&now), "cuptiGetTimestamp")) add("mark", now, now, 0, "stop");
    write_rows();
  }
}

}  // namespace

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  if (!std::getenv("TG_TIMELINE")) {
    std::fprintf(stderr, "tg_timeline: set TG_TIMELINE to the CSV file to write\n");
    return 0;
  }
  const bool started =
      ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks") &&
      ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records") &&
      ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enabling memcpy records") &&
      ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enabling memset records") &&
      ok(cuptiSubscribe(&subscriber, on_api, nullptr), "cuptiSubscribe") &&
      ok(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                             CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000), "cuptiEnableCallback (start)") &&
      ok(cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                             CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000), "cuptiEnableCallback (stop)");
  if (started) std::atexit(write_rows);
  return started ? 1 : 0;
}
