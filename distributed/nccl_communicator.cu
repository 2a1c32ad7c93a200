#include <nccl.h>

#include <vector>

#include "core/cuda/cuda_utils.cuh"
#include "distributed/detail/nccl_communicator.h"

namespace tg::distributed {
namespace {

#define TG_NCCL_CHECK(call)                                                                       \
  do {                                                                                            \
    ncclResult_t tg_res_ = (call);                                                                \
    TG_CHECK(tg_res_ == ncclSuccess, "nccl", #call, " failed: ", ncclGetErrorString(tg_res_), " (", \
             ncclGetLastError(nullptr), ")");                                                     \
  } while (0)

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case kFloat32: return ncclFloat32;
    case kBFloat16: return ncclBfloat16;
    case kFloat64: return ncclFloat64;
    case kInt32: return ncclInt32;
    case kInt64: return ncclInt64;
    default: TG_CHECK(false, "nccl", "no NCCL type for ", d);
  }
  return ncclFloat32;
}

// Collectives run on a stream of their own, after the compute stream's queued work (an event),
// so a bucket's all-reduce overlaps the rest of backward; wait() makes the compute stream wait.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const std::string& id, int rank, int world, int device) : rank_(rank), world_(world), device_(device) {
    TG_CHECK(id.size() == sizeof(ncclUniqueId), "nccl", "the id has ", id.size(), " bytes, wants ", sizeof(ncclUniqueId));
    ncclUniqueId uid;
    std::copy(id.begin(), id.end(), uid.internal);
    TG_CUDA_CHECK(cudaSetDevice(device));
    int lowest = 0, highest = 0;
    TG_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    TG_CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, highest));
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    TG_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    TG_NCCL_CHECK(ncclCommInitRank(&comm_, world, uid, rank));
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(comm_stream_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(compute_done_);
    cudaEventDestroy(comm_done_);
    cudaStreamDestroy(comm_stream_);
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce(const Tensor& t, ReduceOp op) override {
    check_collective_tensor("all_reduce", t);
    enqueue(t);
    TG_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                op == ReduceOp::Sum ? ncclSum : ncclAvg, comm_, comm_stream_));
  }
  void broadcast(const Tensor& t, int root) override {
    check_collective_tensor("broadcast", t);
    TG_CHECK(root >= 0 && root < world_, "broadcast", "root ", root, " is not a rank of a group of ", world_);
    enqueue(t);
    TG_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                                comm_, comm_stream_));
  }
  void wait() override {
    TG_CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
    TG_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream(device_), comm_done_, 0));
    // The compute stream now runs after the collectives: their tensors may be freed and reused.
    in_flight_.clear();
  }

 private:
  void enqueue(const Tensor& t) {
    TG_CHECK(t.device() == Device::cuda(device_), "nccl", "the tensor is on ", t.device(), ", the communicator on ",
             Device::cuda(device_));
    TG_CUDA_CHECK(cudaEventRecord(compute_done_, cuda::stream(device_)));
    TG_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, compute_done_, 0));
    in_flight_.push_back(t);  // the caching allocator must not hand its memory out before wait()
  }

  const int rank_, world_, device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr, comm_done_ = nullptr;
  std::vector<Tensor> in_flight_;
};

}  // namespace

std::string nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == kNcclIdBytes);
  ncclUniqueId uid;
  TG_NCCL_CHECK(ncclGetUniqueId(&uid));
  return std::string(uid.internal, sizeof(uid.internal));
}

std::unique_ptr<Communicator> make_nccl_communicator(const std::string& id, int rank, int world_size, int device) {
  return std::make_unique<NcclCommunicator>(id, rank, world_size, device);
}

}  // namespace tg::distributed
