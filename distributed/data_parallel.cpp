#include "distributed/data_parallel.h"

#include "core/factory.h"
#include "core/primitives.h"
#include "ops/cast.h"

namespace tg::distributed {
namespace {

constexpr const char* kOp = "DataParallel";

// What every rank must agree on: the parameters' count, sizes and dtypes, and the buckets.
std::vector<int64_t> layout_signature(const DataParallel::NamedParams& params,
                                      const std::vector<DataParallel::Bucket>& buckets) {
  std::vector<int64_t> sig = {static_cast<int64_t>(params.size()), static_cast<int64_t>(buckets.size())};
  for (const auto& [name, p] : params) {
    sig.push_back(p.numel());
    sig.push_back(static_cast<int64_t>(p.dtype()));
  }
  return sig;
}

}  // namespace

DataParallel::DataParallel(NamedParams params, Communicator& comm, DataParallelOptions options)
    : params_(std::move(params)), comm_(comm), arrived_(params_.size(), false) {
  TG_CHECK(!params_.empty(), kOp, "got no parameters to synchronise");
  TG_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0, kOp, "bucket caps must be positive, got ",
           options.first_bucket_cap_mb, " MiB (first) and ", options.bucket_cap_mb, " MiB");
  const Device device = params_[0].second.device();
  for (const auto& [name, p] : params_) {
    TG_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), kOp, "parameter '", name,
             "' is not a leaf that requires grad (pass the trainable parameters)");
    TG_CHECK(p.device() == device, kOp, "parameter '", name, "' is on ", p.device(), ", '", params_[0].first,
             "' on ", device, ": every parameter wants one device");
    TG_CHECK(is_floating_point(p.dtype()), kOp, "parameter '", name, "' is ", p.dtype(), ": gradients are floating point");
  }
  // Reverse order, a new bucket at a dtype change or when the bucket's cap would be passed.
  // Gradients that fit one bucket in all (LoRA's) get one: a single fused all-reduce.
  double total_bytes = 0;
  for (const auto& [name, p] : params_) total_bytes += static_cast<double>(p.nbytes());
  const double first_cap_mb = total_bytes <= options.bucket_cap_mb * 1048576.0 ? options.bucket_cap_mb
                                                                                 : options.first_bucket_cap_mb;
  where_.resize(params_.size());
  int64_t filled = 0;  // elements in the last bucket
  for (size_t i = params_.size(); i-- > 0;) {
    const Tensor& p = params_[i].second;
    const double cap_bytes = (buckets_.size() == 1 ? first_cap_mb : options.bucket_cap_mb) * 1048576.0;
    const bool fresh = buckets_.empty() || params_[buckets_.back().params[0]].second.dtype() != p.dtype() ||
                       static_cast<double>((filled + p.numel()) * static_cast<int64_t>(p.element_size())) > cap_bytes;
    if (fresh) buckets_.emplace_back(), filled = 0;
    Bucket& b = buckets_.back();
    where_[i] = {buckets_.size() - 1, b.params.size()};
    b.params.push_back(i);
    b.offsets.push_back(filled);
    filled += p.numel();
  }
  for (Bucket& b : buckets_) {
    const Tensor& last = params_[b.params.back()].second;
    b.buffer = Tensor::empty({b.offsets.back() + last.numel()}, {last.dtype(), device, false});
    b.pending = b.params.size();
  }

  // Mismatched models would pair unrelated collectives: compare with rank 0's layout first.
  const std::vector<int64_t> mine = layout_signature(params_, buckets_);
  const Tensor sig = to(from_vector(mine, {static_cast<int64_t>(mine.size())}), device);
  Tensor count = to(from_vector(std::vector<int64_t>{static_cast<int64_t>(mine.size())}, {1}), device);
  comm_.broadcast(count, 0);
  comm_.wait();
  TG_CHECK(count.item<int64_t>() == static_cast<int64_t>(mine.size()), kOp, "rank ", comm_.rank(), " has ",
           params_.size(), " parameters, rank 0 another number: every rank wants the same model");
  comm_.broadcast(sig, 0);
  comm_.wait();
  const std::vector<int64_t> root = sig.to_vector<int64_t>();
  for (size_t k = 2; k < mine.size(); k += 2) {
    const auto& [name, p] = params_[(k - 2) / 2];
    TG_CHECK(root[k] == mine[k] && root[k + 1] == mine[k + 1], kOp, "parameter '", name, "' has ", p.numel(),
             " elements of ", p.dtype(), " on rank ", comm_.rank(), " and ", root[k], " elements of dtype #", root[k + 1],
             " on rank 0: every rank wants the same model");
  }
  TG_CHECK(root == mine, kOp, "rank ", comm_.rank(), " made ", buckets_.size(), " buckets, rank 0 ", root[1],
           ": every rank wants the same bucket caps");

  if (options.broadcast_parameters) {
    NoGradGuard no_grad;
    for (const auto& [name, p] : params_) {
      const Tensor flat = p.is_contiguous() ? p.detach() : clone_data(p);
      comm_.broadcast(flat, 0);
      comm_.wait();
      if (!flat.shares_storage_with(p)) copy_(p, flat);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i)
    hooks_.push_back(register_post_accumulate_grad_hook(params_[i].second, [this, i](const Tensor&) { on_gradient(i); }));
}

Tensor DataParallel::slot(const Bucket& b, size_t k) const {
  const Shape& shape = params_[b.params[k]].second.shape();
  return b.buffer.as_strided(shape, contiguous_strides(shape), b.offsets[k]);
}

void DataParallel::on_gradient(size_t i) {
  if (!sync_enabled_) return;
  TG_CHECK(!arrived_[i], kOp, "parameter '", params_[i].first, "' got a second gradient before sync_gradients(): "
           "call sync_gradients() after each step's last backward, and run the earlier micro-batches under no_sync()");
  arrived_[i] = true;
  auto [bi, k] = where_[i];
  Bucket& b = buckets_[bi];
  copy_(slot(b, k), params_[i].second.grad());
  if (--b.pending == 0) launch_ready_buckets();
}

void DataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(buckets_[next_launch_++]);
}

void DataParallel::launch(Bucket& b) {
  comm_.all_reduce(b.buffer, ReduceOp::Avg);
  b.launched = true;
}

void DataParallel::sync_gradients() {
  TG_CHECK(sync_enabled_, kOp, "sync_gradients() inside no_sync(): the gradients are not being collected");
  NoGradGuard no_grad;
  for (size_t bi = next_launch_; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    for (size_t k = 0; k < b.params.size(); ++k) {
      if (arrived_[b.params[k]]) continue;
      const Tensor g = params_[b.params[k]].second.grad();  // from no_sync micro-batches, or none
      if (g.defined()) copy_(slot(b, k), g);
      else zero_(slot(b, k));
    }
    b.pending = 0;
  }
  launch_ready_buckets();
  comm_.wait();
  for (Bucket& b : buckets_) {
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params_[b.params[k]].second;
      if (p.grad().defined()) copy_(p.grad(), slot(b, k));
      else p.set_grad(clone_data(slot(b, k)));
      arrived_[b.params[k]] = false;
    }
    b.pending = b.params.size();
    b.launched = false;
  }
  next_launch_ = 0;
}

}  // namespace tg::distributed
