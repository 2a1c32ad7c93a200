#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <set>
#include <span>

#include "core/activation_offload.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/limits.h"
#include "distributed/init.h"
#include "io/file.h"
#include "io/number.h"
#include "nn/models/architecture.h"
#include "nn/models/pretrained.h"
#include "nn/norm.h"
#include "ops/cast.h"
#include "ops/shape.h"
#include "ops/unary.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "train/checkpoint.h"
#include "train/detail/preference_step.h"
#include "train/graphed_step.h"
#include "train/loss_svg.h"
#include "train/output_dir.h"
#include "train/train_log.h"

namespace tg::train {
namespace {

namespace fs = std::filesystem;
constexpr const char* kWhere = "Trainer";
constexpr const char* kArgs = "TrainingArguments";

// transformers' get_decay_parameter_names: biases and the weights of norm layers take no decay.
std::vector<optim::ParamGroupSpec> param_groups(nn::CausalLM& model, double weight_decay) {
  std::set<std::string> no_decay;
  for (const auto& [path, m] : model.named_modules()) {
    const bool norm = nn::is_norm(*m);
    for (const auto& [name, p] : m->named_parameters(/*recurse=*/false))
      if (norm || name == "bias") no_decay.insert(path.empty() ? name : path + "." + name);
  }
  optim::NamedParams decay, rest;
  for (const auto& [name, p] : model.named_trainable_parameters())
    (no_decay.count(name) ? rest : decay).emplace_back(name, p);
  std::vector<optim::ParamGroupSpec> groups;
  if (!decay.empty()) groups.emplace_back(decay, optim::GroupOptions{.lr = std::nullopt, .weight_decay = weight_decay});
  if (!rest.empty()) groups.emplace_back(rest, optim::GroupOptions{.lr = std::nullopt, .weight_decay = 0.0});
  return groups;
}

// With offload_activations each layer's checkpointed input, [batch, seq, hidden] in the embeddings'
// dtype, waits in host memory until backward: refused now when the host cannot hold a micro-batch's.
void check_offload_memory(nn::CausalLM& model, int64_t batch, int64_t seq) {
  const Tensor& embedding = model.input_embeddings().weight;
  const int64_t layers = model.dims().num_layers;
  const double need = static_cast<double>(layers) * static_cast<double>(batch) * static_cast<double>(seq) *
                      static_cast<double>(embedding.shape()[1]) * static_cast<double>(element_size(embedding.dtype()));
  const MemoryStats pinned = offload_memory_stats();
  // Pinned buffers kept from an earlier run are reused.
  const double have = static_cast<double>(available_memory(Device::cpu())) + static_cast<double>(pinned.bytes_reserved) -
                      static_cast<double>(pinned.bytes_in_use);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  TG_CHECK(available_memory(Device::cpu()) == 0 || need <= have, kArgs, "gradient_checkpointing_kwargs.offload_activations: ",
           layers, " layers x ", batch, " x ", seq, " tokens of checkpointed activations take ", need / gib,
           " GiB of host memory, the host has ", have / gib, " GiB available: lower per_device_train_batch_size "
           "or the sequence length, or keep the activations on the GPU");
}

// bf16: the frozen base in bfloat16, the trainable weights in float32 (peft's autocast_adapter_dtype).
// A 4-bit layer's quantisation state stays float32, as bitsandbytes keeps it (its buffers keep their dtype).
void cast_for_bf16(nn::CausalLM& model) {
  bool frozen = false;
  for (const auto& [name, p] : model.named_parameters()) frozen |= !p.requires_grad() && is_floating_point(p.dtype());
  TG_CHECK(frozen, kArgs, "bf16 is true but every parameter trains: bf16 is a bfloat16 frozen base with float32 ",
           "trainable weights (for bfloat16 full fine-tuning cast the model to tg::kBFloat16 and leave bf16 false)");
  model.to(kBFloat16, [](const std::string&, const Tensor& t) { return !t.requires_grad(); });
  model.to(kFloat32, [](const std::string&, const Tensor& t) { return t.requires_grad(); });
}

std::string meta_at(const CheckpointMetadata& meta, const std::string& key, const std::string& file) {
  auto it = meta.find(key);
  TG_CHECK(it != meta.end(), kWhere, "'", file, "' lacks '", key, "': not written by train::Trainer");
  return it->second;
}

// A count the checkpoint's metadata holds, in [lo, INT64_MAX].
int64_t meta_integer(const CheckpointMetadata& meta, const std::string& key, const std::string& file, int64_t lo) {
  return io::checked_integer<int64_t>(meta_at(meta, key, file), lo, INT64_MAX, kWhere, "'" + file + "' metadata " + key);
}

// A JSON value the checkpoint's metadata holds.
json::Value meta_json(const CheckpointMetadata& meta, const std::string& key, const std::string& file) {
  try {
    return json::parse(meta_at(meta, key, file));
  } catch (const Error& e) {
    fail(kWhere, "'", file, "' metadata ", key, " is not JSON: ", e.what());
  }
}

std::vector<LogEntry> parse_log_history(const json::Value& state) {
  std::vector<LogEntry> history;
  const json::Value* h = state.find("log_history");
  if (!h) return history;
  for (const json::Value& row : h->as_array("log_history")) {
    LogEntry e{row.at("step").as_int("step"), {}};
    for (const std::string& k : row.keys())
      if (k != "step" && row.at(k).is_number()) e.values[k] = row.at(k).as_double(k);
    history.push_back(std::move(e));
  }
  return history;
}

}  // namespace

Trainer::Trainer(std::shared_ptr<nn::CausalLM> model, std::shared_ptr<const data::SequenceDataset> train_dataset,
                 TrainingArguments args, std::shared_ptr<const data::SequenceDataset> eval_dataset)
    : model_(std::move(model)), args_(std::move(args)), train_(std::move(train_dataset)), eval_(std::move(eval_dataset)) {
  TG_CHECK(model_ != nullptr, kWhere, "the model is null");
  TG_CHECK(train_ != nullptr, kWhere, "the train_dataset is null");
  args_.validate();
  const int64_t context = model_->dims().context;
  for (auto [what, ds] : {std::pair{"train_dataset", train_.get()}, std::pair{"eval_dataset", eval_.get()}}) {
    if (!ds) continue;
    TG_CHECK(ds->rows() > 0, kWhere, "the ", what, " has no rows of ", ds->seq(), " tokens");
    TG_CHECK(ds->seq() <= context, kWhere, "the ", what, "'s rows have ", ds->seq(), " tokens, the model's context is ",
             context, " (", model_->dims().context_field, ")");
  }
  setup(kWhere);
}

Trainer::Trainer(std::shared_ptr<nn::CausalLM> model, TrainingArguments args, const char* name)
    : model_(std::move(model)), args_(std::move(args)) {
  TG_CHECK(model_ != nullptr, name, "the model is null");
  args_.validate();
  setup(name);
}

// The device, the ranks' GPUs, the precision, gradient checkpointing and the optimizer.
void Trainer::setup(const char* name) {
  device_ = args_.use_cpu ? Device::cpu() : default_device();
  if (distributed::launched()) {  // the rank's GPU now; the group is joined by train()
    TG_CHECK(!args_.use_cpu, kArgs, "use_cpu with data parallelism: the ranks reduce over NCCL, one GPU each");
    const distributed::LaunchInfo launch = distributed::launch_info();
    distributed::check_can_join(launch);
    device_ = Device::cuda(launch.local_rank);
  }
  if (train_) check_batch_memory(distributed::launched() ? distributed::launch_info().world_size : 1);
  TG_CHECK(!model_->trainable_parameters().empty(), name, "the model has no trainable parameter (wrap it with ",
           "peft::apply_lora, or leave its weights trainable for full fine-tuning)");
  if (args_.bf16) cast_for_bf16(*model_);
  model_->to(device_);
  model_->train();
  if (args_.gradient_checkpointing) model_->gradient_checkpointing_enable(args_.gradient_checkpointing_kwargs);
  if (args_.gradient_checkpointing_kwargs.offload_activations && train_)
    check_offload_memory(*model_, args_.per_device_train_batch_size, train_->seq());
  optimizer_ = std::make_unique<optim::AdamW>(
      param_groups(*model_, args_.weight_decay),
      optim::AdamWOptions{.lr = args_.learning_rate, .beta1 = args_.adam_beta1, .beta2 = args_.adam_beta2,
                          .eps = args_.adam_epsilon, .weight_decay = args_.weight_decay});
  for (const optim::ParamGroup& g : optimizer_->param_groups()) base_lrs_.push_back(g.lr);
}

Trainer::~Trainer() = default;

void Trainer::use_communicator(distributed::Communicator& comm) {
  TG_CHECK(comm_ == nullptr, kWhere, "use_communicator: the Trainer already trains data-parallel");
  comm_ = &comm;
  check_batch_memory(comm.world_size());
  rank_ = comm.rank(), world_ = comm.world_size();
  state_.is_world_process_zero = rank_ == 0;
  // Rank 0's weights on every rank (the same seed gives the same anyway), gradients averaged.
  dp_ = std::make_unique<distributed::DataParallel>(model_->named_trainable_parameters(), comm);
}

double Trainer::epoch_at(int64_t step) const {
  return static_cast<double>(step) * static_cast<double>(args_.gradient_accumulation_steps) *
         static_cast<double>(args_.per_device_train_batch_size * world_) / static_cast<double>(train_rows());
}

int64_t Trainer::train_rows() const { return train_->rows(); }

std::string Trainer::describe_train_data() const {
  return std::to_string(train_->rows()) + " rows of " + std::to_string(train_->seq()) + " tokens";
}

DataFingerprint Trainer::compute_train_fingerprint() const { return fingerprint(*train_); }

json::Value Trainer::objective_config() const { return json::Value(); }

std::string Trainer::cuda_graph_blocker() const { return ""; }

void Trainer::evaluate_in_training() {
  if (eval_) evaluate();
}

void Trainer::check_batch_memory(int64_t world) const {
  // Each step draws the global batch on the host; evaluation draws up to its batch of rows at once.
  train_->check_batch_memory(args_.per_device_train_batch_size * world, kArgs,
                             "per_device_train_batch_size " + std::to_string(args_.per_device_train_batch_size) +
                                 " x " + std::to_string(world) + " ranks: rows");
  if (eval_)
    eval_->check_batch_memory(std::min(args_.per_device_eval_batch_size, eval_->rows()), kArgs,
                              "per_device_eval_batch_size " + std::to_string(args_.per_device_eval_batch_size) + ": rows");
}

const DataFingerprint& Trainer::train_fingerprint() {
  if (!fingerprint_) fingerprint_ = compute_train_fingerprint();
  return *fingerprint_;
}

std::vector<double> Trainer::sum_over_ranks(std::vector<double> values) const {
  if (!comm_) return values;
  const Tensor t = to(from_vector(values, {static_cast<int64_t>(values.size())}), device_);
  comm_->all_reduce(t, distributed::ReduceOp::Sum);
  comm_->wait();
  return t.to_vector<double>();
}

data::Batch Trainer::shard(const data::Batch& global) const {
  const int64_t n = args_.per_device_train_batch_size;
  auto rows = [&](const Tensor& t) { return contiguous(slice(t, 0, rank_ * n, (rank_ + 1) * n)); };
  data::Batch out{to(rows(global.ids), device_), to(rows(global.labels), device_), 0,
                  global.position_ids.defined() ? to(rows(global.position_ids), device_) : Tensor()};
  // As the dataset counts them: positions after a row's first whose label is not ignored.
  const std::vector<int64_t> labels = rows(global.labels).to_vector<int64_t>();
  const int64_t seq = global.labels.size(1);
  for (size_t i = 0; i < labels.size(); ++i)
    out.targets += static_cast<int64_t>(i) % seq != 0 && labels[i] != data::kIgnoreIndex;
  return out;
}

void Trainer::claim_output_dir() {
  const bool rank_zero = !distributed::launched() || distributed::launch_info().rank == 0;
  if (output_lock_ || !main_process() || !rank_zero) return;
  output_lock_ = OutputDirLock::acquire(args_.output_dir);
  if (args_.resume_from_checkpoint.empty()) prepare_fresh_output_dir(args_.output_dir, args_.overwrite_output_dir);
}

TrainLog& Trainer::train_log() {
  // Outside train() (an evaluate() before or after it): appended to the files, every row of them kept.
  if (!log_) claim_output_dir();
  if (!log_)
    log_ = std::make_unique<TrainLog>(main_process() ? args_.output_dir : "", state_.max_steps, INT64_MAX,
                                      !args_.disable_tqdm);
  return *log_;
}

void Trainer::write_loss_curve() const {
  if (!main_process()) return;
  LossSeries train{"train", {}, false}, eval{"evaluation", {}, true};
  for (const LogEntry& e : state_.log_history) {
    if (e.has("loss")) train.points.emplace_back(static_cast<double>(e.step), e.at("loss"));
    if (e.has("eval_loss")) eval.points.emplace_back(static_cast<double>(e.step), e.at("eval_loss"));
  }
  write_loss_svg((fs::path(args_.output_dir) / "loss.svg").string(), "loss", {train, eval});
}

void Trainer::log(const LogEntry& entry) {
  state_.log_history.push_back(entry);
  if (main_process()) train_log().log(entry);
  if (entry.has("eval_loss")) write_loss_curve();
  for (auto& cb : callbacks_) cb->on_log(state_, entry);
}

TrainOutput Trainer::train() {
  if (!comm_ && distributed::launched()) {
    own_comm_ = distributed::init();
    use_communicator(*own_comm_);
  }
  const int64_t accum = args_.gradient_accumulation_steps, global_batch = args_.per_device_train_batch_size * world_;
  if (args_.max_steps > 0) {
    state_.max_steps = args_.max_steps;
  } else {
    state_.max_steps = steps_for_epochs(args_.num_train_epochs, train_rows(), global_batch, accum);
    check_warmup(args_.warmup_steps, state_.max_steps, "the max_steps of num_train_epochs");
  }
  // What a captured step cannot hold: a host-weighted sum of micro-batches, fresh dropout masks,
  // checkpointing's recomputation (not validated under capture), another rank's collectives.
  std::string blocker = !device_.is_cuda() ? "the device is the CPU"
                        : !cuda_graph_blocker().empty() ? cuda_graph_blocker()
                        : accum != 1       ? "gradient_accumulation_steps is " + std::to_string(accum)
                        : args_.gradient_checkpointing ? "gradient_checkpointing is on"
                        : comm_ ? "it trains data-parallel (" + std::to_string(world_) + " ranks)"
                                : "";
  const auto lora = peft::lora_layers(*model_);
  for (const auto& [path, layer] : lora)
    if (blocker.empty() && layer->lora_dropout && layer->lora_dropout->p > 0)
      blocker = "the LoRA layer '" + path + "' has dropout " + std::to_string(layer->lora_dropout->p);
  TG_CHECK(args_.cuda_graph != "on" || blocker.empty(), kArgs, "cuda_graph 'on': cannot capture the step, ", blocker);
  // auto captures the LoRA step of the families checked under capture; on tries the rest.
  const bool validated = peft::has_lora(*model_) && model_->architecture().cuda_graph_validated;
  use_graph_ = args_.cuda_graph != "off" && blocker.empty() && (validated || args_.cuda_graph == "on");

  claim_output_dir();
  int64_t start = 0;
  if (!args_.resume_from_checkpoint.empty()) {
    start = resume();
  } else {
    manual_seed(static_cast<uint64_t>(args_.seed));
    state_.log_history.clear();
  }
  state_.global_step = start;
  state_.epoch = epoch_at(start);
  // The files keep the rows up to the step trained from (a resumed run redoes the later ones).
  log_ = std::make_unique<TrainLog>(main_process() ? args_.output_dir : "", state_.max_steps, start,
                                    !args_.disable_tqdm);
  TrainLog& train_log = *log_;
  if (start > 0 && main_process())
    train_log.note("resumed from step " + std::to_string(start) + " of " + std::to_string(state_.max_steps));
  if (start >= state_.max_steps) {
    if (main_process())
      train_log.note("the checkpoint is at max_steps " + std::to_string(state_.max_steps) +
                     ": nothing to train (raise max_steps to extend the run)");
    return {start, NAN};
  }
  if (main_process()) {  // what the run does, in a line
    std::string line = "training: " + describe_train_data() + ", " + std::to_string(accum) + " x " +
                       std::to_string(global_batch) + " rows a step, steps " + std::to_string(start + 1) + "-" +
                       std::to_string(state_.max_steps);
    if (comm_) line += ", data parallel: " + std::to_string(world_) + " ranks over " + comm_->backend();
    if (device_.is_cuda())
      line += use_graph_                       ? ", the step replayed as a CUDA graph"
              : args_.cuda_graph == "off"      ? ", no CUDA graph (cuda_graph 'off')"
              : !blocker.empty()               ? ", no CUDA graph: " + blocker
                                               : ", no CUDA graph: this model is not validated under capture yet "
                                                 "(cuda_graph 'on' tries it)";
    train_log.note(line);
  }
  for (auto& cb : callbacks_) cb->on_train_begin(state_);

  optim::Optimizer& opt = *optimizer_;
  graphed_ = std::make_unique<GraphedStep>(use_graph_, [this](const data::Batch& b) {
    return device_step({&b, 1}, b.targets);
  });
  double run_loss = 0, window_loss = 0;
  int64_t run_steps = 0, window_steps = 0, window_tokens = 0, window_skipped = 0;
  std::map<std::string, std::pair<double, int64_t>> window_metrics;  // sum, steps
  auto window_start = std::chrono::steady_clock::now();
  for (int64_t step = start + 1; step <= state_.max_steps; ++step) {
    const double factor = optim::lr_factor(args_.lr_scheduler_type, step - 1, args_.warmup_steps, state_.max_steps);
    std::span<optim::ParamGroup> groups = opt.param_groups();
    for (size_t g = 0; g < groups.size(); ++g) groups[g].lr = base_lrs_[g] * factor;
    const double lr = opt.lr();
    StepResult r = run_step(step);
    state_.global_step = step;
    state_.epoch = epoch_at(step);
    if (std::isfinite(r.loss)) run_loss += r.loss, ++run_steps, window_loss += r.loss, ++window_steps;
    else ++window_skipped;
    for (const auto& [name, v] : r.metrics) window_metrics[name].first += v, ++window_metrics[name].second;
    window_tokens += r.tokens;
    if (main_process()) train_log.step(step, r.loss, lr, r.tokens);
    TrainerControl control;
    for (auto& cb : callbacks_) cb->on_step_end(state_, control);
    const bool stop = sum_over_ranks({control.should_training_stop ? 1.0 : 0.0})[0] > 0;
    if (step % args_.logging_steps == 0 || step == state_.max_steps || stop) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
      // A window whose steps all lacked targets has no loss (not NaN): the row counts them instead.
      LogEntry entry{step, {{"learning_rate", lr},
                            {"tokens_per_second", seconds > 0 ? static_cast<double>(window_tokens) / seconds : 0.0},
                            {"epoch", state_.epoch}}};
      if (window_steps) entry.values["loss"] = window_loss / static_cast<double>(window_steps);
      if (window_skipped) entry.values["steps_without_targets"] = static_cast<double>(window_skipped);
      if (r.grad_norm.defined()) entry.values["grad_norm"] = r.grad_norm.item();
      for (const auto& [name, sum_steps] : window_metrics)
        entry.values[name] = sum_steps.first / static_cast<double>(sum_steps.second);
      log(entry);
      window_loss = 0, window_steps = 0, window_tokens = 0, window_skipped = 0;
      window_metrics.clear();
      window_start = std::chrono::steady_clock::now();
    }
    if (args_.eval_steps > 0 && step % args_.eval_steps == 0) evaluate_in_training();
    // The last checkpoint (and the model saved after) must not pass an untrained adapter for a trained one.
    TG_CHECK(run_steps > 0 || !(stop || step == state_.max_steps), kWhere, "none of the ", step - start, " steps (",
             start + 1, "-", step, ") had a target token: every label of their batches is -100 (prompt, padding, or ",
             "turns cut away by the sequence length), so nothing was trained; check the train_dataset's labels and seq");
    if (stop || (args_.save_steps > 0 && step % args_.save_steps == 0) || step == state_.max_steps)
      save_checkpoint(step);
    if (stop) break;
  }
  for (auto& cb : callbacks_) cb->on_train_end(state_);
  train_log.finish();
  write_loss_curve();
  return {state_.global_step, run_steps ? run_loss / static_cast<double>(run_steps) : NAN};
}

Trainer::StepResult Trainer::run_step(int64_t step) {
  const int64_t accum = args_.gradient_accumulation_steps, global_batch = args_.per_device_train_batch_size * world_;
  // A step's micro-batches weigh by their target tokens: the loss is the mean over all of them.
  std::vector<data::Batch> micro;
  int64_t targets = 0;
  for (int64_t k = 0; k < accum; ++k) {
    const data::Batch global = train_->batch((step - 1) * accum + k, global_batch, static_cast<uint64_t>(args_.seed),
                                             comm_ ? Device::cpu() : device_);
    targets += global.targets;
    micro.push_back(comm_ ? shard(global) : global);
  }
  StepResult r;
  r.tokens = accum * global_batch * train_->seq();
  if (targets == 0) {  // the global batch's count: every rank skips the step alike
    if (main_process())
      train_log().note("step " + std::to_string(step) + ": every label of the batch is -100 (prompt or padding); no update");
    return r;
  }
  // The graph holds one micro-batch of one process (train() decided).
  const std::vector<Tensor> out = graphed_->enabled() ? (*graphed_)(micro[0]) : device_step(micro, targets);
  double loss = 0;
  for (size_t k = 0; k < micro.size(); ++k)
    if (out[k].defined()) loss += out[k].item() * static_cast<double>(micro[k].targets) / static_cast<double>(targets);
  r.loss = sum_over_ranks({loss})[0];
  r.grad_norm = out.back();
  return r;
}

// One optimizer step on the device, the same eagerly and under capture: each micro-batch's loss
// weighted by its share of the step's target tokens. Returns each micro-batch's loss (undefined
// where it has no target) and the gradient norm (undefined without clipping).
std::vector<Tensor> Trainer::device_step(std::span<const data::Batch> micro, int64_t targets) {
  return optimizer_step(
      micro.size(),
      [&](size_t k) {
        const data::Batch& b = micro[k];  // with data parallelism sync_gradients adds zeros for an empty one
        return b.targets == 0 ? Tensor() : model_->loss(b.ids, b.labels, b.position_ids);
      },
      [&](size_t k) { return static_cast<double>(micro[k].targets) / static_cast<double>(targets); });
}

std::vector<Tensor> Trainer::optimizer_step(size_t micro_batches, const std::function<Tensor(size_t)>& loss_of,
                                            const std::function<double(size_t)>& weight_of) {
  optimizer_->zero_grad();
  std::vector<Tensor> out;
  for (size_t k = 0; k < micro_batches; ++k) {
    Tensor loss = loss_of(k);
    out.push_back(loss);
    if (!loss.defined()) continue;
    // The ranks' gradients are averaged: this rank's share is scaled up by the world size.
    Tensor scaled = micro_batches == 1 && !comm_ ? loss : mul(loss, weight_of(k) * world_);
    std::optional<distributed::DataParallel::NoSync> no_sync;  // accumulate locally but for the last
    if (dp_ && k + 1 < micro_batches) no_sync.emplace(*dp_);
    scaled.backward();
  }
  if (dp_) dp_->sync_gradients();
  out.push_back(args_.max_grad_norm > 0 ? optim::clip_grad_norm_(model_->trainable_parameters(), args_.max_grad_norm)
                                        : Tensor());
  optimizer_->step();
  return out;
}

LogEntry Trainer::evaluate(std::shared_ptr<const data::SequenceDataset> dataset, const std::string& metric_key_prefix) {
  if (!dataset) dataset = eval_;
  TG_CHECK(dataset != nullptr, kWhere, "evaluate: no eval_dataset (pass one to the constructor or to evaluate)");
  TG_CHECK(dataset->seq() <= model_->dims().context, kWhere, "evaluate: the dataset's rows have ", dataset->seq(),
           " tokens, the model's context is ", model_->dims().context);
  const bool was_training = model_->is_training();
  double total = 0;
  int64_t targets = 0;
  {
    NoGradGuard no_grad;
    model_->eval();
    for (int64_t first = 0; first < dataset->rows(); first += args_.per_device_eval_batch_size) {
      const data::Batch b =
          dataset->rows_batch(first, std::min(args_.per_device_eval_batch_size, dataset->rows() - first), device_);
      if (b.targets == 0) continue;
      total += model_->loss(b.ids, b.labels, b.position_ids).item() * static_cast<double>(b.targets);
      targets += b.targets;
    }
    model_->train(was_training);
  }
  TG_CHECK(targets > 0, kWhere, "evaluate: the ", metric_key_prefix, " dataset has no target token (every label -100)");
  const double loss = total / static_cast<double>(targets);
  const std::string& p = metric_key_prefix;
  LogEntry metrics{state_.global_step, {{p + "_loss", loss},
                                        {p + "_perplexity", std::exp(loss)},
                                        {p + "_tokens", static_cast<double>(targets)},
                                        {"epoch", state_.epoch}}};
  report_evaluation(metrics);
  return metrics;
}

void Trainer::report_evaluation(const LogEntry& metrics) {
  log(metrics);
  for (auto& cb : callbacks_) cb->on_evaluate(state_, metrics);
}

Trainer::StepResult Trainer::mean_step(size_t micro_batches, const LossOf& loss_of) {
  detail::MetricMeans means;
  const std::vector<Tensor> out = optimizer_step(
      micro_batches,
      [&](size_t k) {
        Metrics m;
        Tensor loss = loss_of(k, m);
        means.add(m);
        return loss;
      },
      [&](size_t) { return 1.0 / static_cast<double>(micro_batches); });
  StepResult r{.loss = 0, .grad_norm = out.back(), .metrics = means.means()};
  for (size_t k = 0; k < micro_batches; ++k) r.loss += out[k].item() / static_cast<double>(micro_batches);
  return r;
}

LogEntry Trainer::evaluate_rows(int64_t rows, const std::function<Tensor(std::span<const int64_t>, Metrics&)>& loss_of,
                                const std::string& prefix) {
  const bool was_training = model_->is_training();
  detail::MetricMeans means;
  {
    NoGradGuard no_grad;
    model_->eval();
    for (int64_t first = 0; first < rows; first += args_.per_device_eval_batch_size) {
      std::vector<int64_t> batch(static_cast<size_t>(std::min(args_.per_device_eval_batch_size, rows - first)));
      std::iota(batch.begin(), batch.end(), first);
      Metrics m;
      m["loss"] = loss_of(batch, m).item();
      means.add(m, static_cast<double>(batch.size()));
    }
    model_->train(was_training);
  }
  LogEntry metrics{state_.global_step, {{"epoch", state_.epoch}}};
  for (const auto& [name, v] : means.means()) metrics.values[prefix + "_" + name] = v;
  report_evaluation(metrics);
  return metrics;
}

peft::LoraConfig Trainer::lora_config() {
  if (lora_config_) return *lora_config_;
  const auto layers = peft::lora_layers(*model_);
  const auto experts = peft::lora_experts(*model_);
  TG_CHECK(!layers.empty() || !experts.empty(), kWhere, "the model has no LoRA layers");
  peft::LoraConfig c{.r = layers.empty() ? experts[0].second->r : layers[0].second->r,
                     .lora_alpha = layers.empty() ? experts[0].second->lora_alpha : layers[0].second->lora_alpha,
                     .lora_dropout = !layers.empty() && layers[0].second->lora_dropout ? layers[0].second->lora_dropout->p : 0.0,
                     .target_modules = {}};
  std::set<std::string> adapter_weights;
  for (const auto& [path, l] : experts) {  // peft's target_parameters: "mlp.experts.gate_up_proj"
    TG_CHECK(l->r == c.r && l->lora_alpha == c.lora_alpha, kWhere, "the LoRA adapters differ (r ", c.r, ", alpha ",
             c.lora_alpha, "; r ", l->r, ", alpha ", l->lora_alpha, " at '", path,
             "'): give save_model their LoraConfig with set_lora_config");
    const std::string block = path.substr(path.rfind('.', path.rfind('.') - 1) + 1);  // "mlp.experts"
    for (const std::string& p : l->parameters) {
      if (std::find(c.target_parameters.begin(), c.target_parameters.end(), block + "." + p) == c.target_parameters.end())
        c.target_parameters.push_back(block + "." + p);
      adapter_weights.insert(path + ".lora_" + p + ".lora_A.weight");
      adapter_weights.insert(path + ".lora_" + p + ".lora_B.weight");
    }
  }
  for (const auto& [path, l] : layers) {
    TG_CHECK(l->r == c.r && l->lora_alpha == c.lora_alpha, kWhere, "the LoRA layers differ (r ", c.r, ", alpha ",
             c.lora_alpha, " at '", layers[0].first, "', r ", l->r, ", alpha ", l->lora_alpha, " at '", path,
             "'): give save_model their LoraConfig with set_lora_config");
    const std::string name = path.substr(path.rfind('.') + 1);
    if (std::find(c.target_modules.begin(), c.target_modules.end(), name) == c.target_modules.end())
      c.target_modules.push_back(name);
    adapter_weights.insert(path + ".lora_A.weight");
    adapter_weights.insert(path + ".lora_B.weight");
  }
  for (const auto& [name, p] : model_->named_trainable_parameters())
    TG_CHECK(adapter_weights.count(name), kWhere, "the trainable parameter '", name, "' is not a LoRA weight: give ",
             "save_model the LoraConfig (its modules_to_save) with set_lora_config");
  return c;
}

void Trainer::save_model(const std::string& dir) {
  if (!main_process()) return;
  if (dir.empty()) claim_output_dir();
  const std::string out = dir.empty() ? args_.output_dir : dir;
  if (peft::has_lora(*model_)) peft::save_adapter(*model_, out, lora_config());
  else nn::save_pretrained(*model_, out);
}

void Trainer::save_checkpoint(int64_t step) {
  const std::string dir = checkpoint_dir(args_.output_dir, step);
  if (main_process()) {
    fs::create_directories(dir);
    // The training state marks a complete checkpoint: a stale one must not vouch for the new files.
    fs::remove(fs::path(dir) / kTrainingStateFile);
    if (peft::has_lora(*model_)) peft::save_adapter(*model_, dir, lora_config());
    json::Value history = json::Value::array();
    for (const LogEntry& e : state_.log_history) history.push_back(json::parse(e.json()));
    json::Value trainer_state = json::Value::object();
    trainer_state.set("global_step", step).set("max_steps", state_.max_steps).set("epoch", state_.epoch);
    trainer_state.set("log_history", history);
    io::write_file_atomic(dir + "/trainer_state.json", json::dump(trainer_state, 2) + "\n");
    CheckpointMetadata meta = {
        {"training_args", json::dump(args_.to_json())},
        {"data_fingerprint", json::dump(train_fingerprint().to_json())},
        {"global_step", std::to_string(step)},
        {"train_batch_size", std::to_string(args_.per_device_train_batch_size * world_)},
        {"max_steps", std::to_string(state_.max_steps)},
        // the data position: the batches of the seeded order drawn so far
        {"batches_drawn", std::to_string(step * args_.gradient_accumulation_steps)}};
    if (const json::Value objective = objective_config(); !objective.is_null())
      meta["objective_config"] = json::dump(objective);
    save_training_state(dir + "/" + kTrainingStateFile, *model_, *optimizer_, step, meta);
    rotate_checkpoints(args_.output_dir, args_.save_total_limit);
  }
  for (auto& cb : callbacks_) cb->on_save(state_, dir);
}

int64_t Trainer::resume() {
  std::string dir = args_.resume_from_checkpoint;
  if (dir == "latest") {
    const auto found = complete_checkpoints(args_.output_dir);
    TG_CHECK(!found.empty(), kArgs, "resume_from_checkpoint 'latest': no complete checkpoint in output_dir '",
             args_.output_dir, "' (checkpoint-<step> folders holding ", kTrainingStateFile, ")");
    dir = found.back().second;
  }
  const std::string file = (fs::path(dir) / kTrainingStateFile).string();
  TG_CHECK(fs::exists(file), kArgs, "resume_from_checkpoint '", dir, "' holds no ", kTrainingStateFile,
           " (not a Trainer checkpoint, or its save was interrupted)");
  const CheckpointMetadata meta = training_state_metadata(file);
  // The arguments first: a changed one would otherwise fail later as something obscure.
  const json::Value then = meta_json(meta, "training_args", file), now = args_.to_json();
  std::string changed;
  for (const std::string& f : TrainingArguments::resume_fixed_fields()) {
    const std::string was = then.find(f) ? json::dump(then.at(f)) : "(absent)", is = json::dump(now.at(f));
    if (was != is) changed += "\n  " + f + ": " + was + " then, " + is + " now";
  }
  TG_CHECK(changed.empty(), kWhere, "resume_from_checkpoint '", dir, "' was trained with other arguments:", changed,
           "\nresume with the same values (output_dir, max_steps, logging / eval / save settings, ",
           "gradient_checkpointing and cuda_graph may change), or start afresh");
  const json::Value objective = objective_config();
  const auto objective_then = meta.find("objective_config");
  const std::string was = objective_then == meta.end() ? "null" : objective_then->second, is = json::dump(objective);
  TG_CHECK(was == is, kWhere, "resume_from_checkpoint '", dir, "' was trained with another objective: ", was,
           " then, ", is, " now (resume with the same settings, or start afresh)");
  const int64_t batch_then = meta_integer(meta, "train_batch_size", file, 1),
                batch_now = args_.per_device_train_batch_size * world_;
  TG_CHECK(batch_then == batch_now, kWhere, "resume_from_checkpoint '", dir, "' trained on batches of ", batch_then,
           " rows (per_device_train_batch_size x ranks), now ", args_.per_device_train_batch_size, " x ", world_, " = ",
           batch_now, " (set per_device_train_batch_size to ", batch_then, " / ranks)");
  const int64_t step = meta_integer(meta, "global_step", file, 0);
  TG_CHECK(step <= state_.max_steps, kArgs, "max_steps ", state_.max_steps, " is below the step ", step,
           " of the checkpoint '", dir, "' (max_steps may grow to extend a run, not shrink)");
  const std::string data_change = describe_change(
      DataFingerprint::from_json(meta_json(meta, "data_fingerprint", file), file), train_fingerprint());
  TG_CHECK(data_change.empty(), kWhere, "resume_from_checkpoint '", dir,
           "': the train_dataset is not the one the checkpoint trained on: ", data_change,
           " (resume on the same data, or start afresh)");
  TG_CHECK(meta_integer(meta, "batches_drawn", file, 0) == step * args_.gradient_accumulation_steps, kWhere, "'",
           file, "' drew ", meta_at(meta, "batches_drawn", file), " batches in ", step, " steps of ",
           args_.gradient_accumulation_steps, " micro-batches");
  const int64_t loaded = load_training_state(file, *model_, *optimizer_);
  const std::string state_file = (fs::path(dir) / "trainer_state.json").string();
  state_.log_history.clear();
  if (fs::exists(state_file)) {
    const std::vector<uint8_t> bytes = io::read_file(state_file, io::kMaxConfigBytes);
    try {
      state_.log_history = parse_log_history(json::parse(std::string(bytes.begin(), bytes.end())));
    } catch (const Error& e) {
      fail(kWhere, "'", state_file, "': ", e.what());
    }
  }
  return loaded;
}

}  // namespace tg::train
