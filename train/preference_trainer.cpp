#include "train/preference_trainer.h"

#include <algorithm>

#include "ops/shape.h"
#include "train/detail/preference_step.h"

namespace tg::train {
namespace {

template <class Config>
const Config& validated(const Config& c) {
  c.validate();
  return c;
}

}  // namespace

PairwiseTrainer::PairwiseTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::PreferencePair> train_pairs,
                                 TrainingArguments args, const data::TruncationOptions& truncation,
                                 bool disable_dropout, std::span<const data::PreferencePair> eval_pairs,
                                 const char* name, Reference reference, int64_t precompute_batch_size)
    : Trainer(std::move(model), std::move(args), name),
      name_(name),
      reference_(reference),
      train_(train_pairs, truncation),
      eval_(eval_pairs, truncation) {
  TG_CHECK(train_.rows() > 0, name, "no training pairs (", train_pairs.size(), " given, ", train_.dropped(),
           " left out: their prompt fills max_length ", truncation.max_length, ")");
  const int64_t context = model_->dims().context;
  TG_CHECK(std::max(train_.longest(), eval_.longest()) <= context, name, "a pair has ",
           std::max(train_.longest(), eval_.longest()), " tokens, the model's context is ", context, " (",
           model_->dims().context_field, "): set max_length to at most ", context);
  if (disable_dropout) detail::disable_dropout(*model_);
  if (reference == Reference::InStep)
    detail::check_in_step_reference(name, *model_, "set precompute_ref_log_probs to compute it once from the model "
                                                   "as given, or reference_free");
  if (reference == Reference::Precomputed) {
    train_reference_ = precompute(train_, precompute_batch_size > 0 ? precompute_batch_size
                                                                    : args_.per_device_train_batch_size);
    eval_reference_ = precompute(eval_, precompute_batch_size > 0 ? precompute_batch_size
                                                                  : args_.per_device_eval_batch_size);
  }
}

PairwiseTrainer::ReferenceTable PairwiseTrainer::precompute(const data::PreferenceDataset& pairs, int64_t batch_size) {
  ReferenceTable t;
  for (int64_t first = 0; first < pairs.rows(); first += batch_size) {
    std::vector<int64_t> rows;
    for (int64_t r = first; r < std::min(pairs.rows(), first + batch_size); ++r) rows.push_back(r);
    const data::PreferenceBatch b = pairs.rows_batch(rows, device_);
    const std::vector<double> lp = detail::reference_log_probs(*model_, b.ids, b.labels).to_vector<double>();
    const size_t B = rows.size();
    t.chosen.insert(t.chosen.end(), lp.begin(), lp.begin() + static_cast<std::ptrdiff_t>(B));
    t.rejected.insert(t.rejected.end(), lp.begin() + static_cast<std::ptrdiff_t>(B), lp.end());
  }
  return t;
}

Tensor PairwiseTrainer::batch_loss(const data::PreferenceBatch& b, const ReferenceTable& table, Metrics& metrics) {
  const int64_t B = static_cast<int64_t>(b.rows.size());
  const Tensor lp = detail::completion_log_probs(*model_, b.ids, b.labels);
  PairLogProbs p{.chosen = slice(lp, 0, 0, B),
                 .rejected = slice(lp, 0, B, 2 * B),
                 .chosen_tokens = {b.completion_tokens.begin(), b.completion_tokens.begin() + B},
                 .rejected_tokens = {b.completion_tokens.begin() + B, b.completion_tokens.end()}};
  if (reference_ == Reference::InStep) {
    const Tensor ref = detail::reference_log_probs(*model_, b.ids, b.labels);
    p.ref_chosen = slice(ref, 0, 0, B), p.ref_rejected = slice(ref, 0, B, 2 * B);
  } else if (reference_ == Reference::Precomputed) {
    p.ref_chosen = detail::gather_values(table.chosen, b.rows, device_);
    p.ref_rejected = detail::gather_values(table.rejected, b.rows, device_);
  }
  PreferenceLoss l = pair_loss(p);
  metrics = std::move(l.metrics);
  return l.loss;
}

Trainer::StepResult PairwiseTrainer::run_step(int64_t step) {
  TG_CHECK(world_ == 1, name_, "data parallelism is not implemented for preference training yet: run one process");
  const std::vector<data::PreferenceBatch> micro = detail::micro_batches(train_, step, args_, device_);
  StepResult r = mean_step(micro.size(), [&](size_t k, Metrics& m) { return batch_loss(micro[k], train_reference_, m); });
  for (const data::PreferenceBatch& b : micro) r.tokens += b.tokens;
  return r;
}

LogEntry PairwiseTrainer::evaluate(const std::string& prefix) {
  TG_CHECK(eval_.rows() > 0, name_, "evaluate: no eval pairs (pass them to the constructor)");
  auto loss_of = [&](std::span<const int64_t> rows, Metrics& m) {
    return batch_loss(eval_.rows_batch(rows, device_), eval_reference_, m);
  };
  return evaluate_rows(eval_.rows(), loss_of, prefix);
}

void PairwiseTrainer::evaluate_in_training() {
  if (eval_.rows() > 0) evaluate();
}

std::string PairwiseTrainer::describe_train_data() const {
  std::string s = std::to_string(train_.rows()) + " pairs (the longest " + std::to_string(train_.longest()) + " tokens";
  if (train_.dropped() > 0) s += "; " + std::to_string(train_.dropped()) + " left out: their prompt fills max_length";
  return s + ")";
}

DataFingerprint PairwiseTrainer::compute_train_fingerprint() const {
  return fingerprint_rows(train_.rows(), train_.longest(), [&](int64_t first, int64_t n) {
    std::vector<int64_t> v;
    for (int64_t r = first; r < first + n; ++r)
      for (const data::Completion* c : {&train_.chosen(r), &train_.rejected(r)}) {
        v.push_back(c->prompt_tokens);
        v.insert(v.end(), c->ids.begin(), c->ids.end());
      }
    return v;
  });
}

std::string PairwiseTrainer::cuda_graph_blocker() const {
  return std::string("the ") + name_ + "'s batches are as long as their longest pair, step by step";
}

DPOTrainer::DPOTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::PreferencePair> train_pairs,
                       TrainingArguments args, DPOConfig config, std::span<const data::PreferencePair> eval_pairs)
    : PairwiseTrainer(std::move(model), train_pairs, std::move(args), truncation_of(validated(config)),
                      config.disable_dropout, eval_pairs, "DPOTrainer",
                      config.reference_free             ? Reference::None
                      : config.precompute_ref_log_probs ? Reference::Precomputed
                                                        : Reference::InStep,
                      config.precompute_ref_batch_size),
      config_(std::move(config)) {}

json::Value DPOTrainer::objective_config() const { return json::Value::object().set("DPOConfig", config_.to_json()); }

CPOTrainer::CPOTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::PreferencePair> train_pairs,
                       TrainingArguments args, CPOConfig config, std::span<const data::PreferencePair> eval_pairs)
    : PairwiseTrainer(std::move(model), train_pairs, std::move(args), truncation_of(validated(config)),
                      config.disable_dropout, eval_pairs, "CPOTrainer", Reference::None, 0),
      config_(std::move(config)) {}

json::Value CPOTrainer::objective_config() const { return json::Value::object().set("CPOConfig", config_.to_json()); }

ORPOTrainer::ORPOTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::PreferencePair> train_pairs,
                         TrainingArguments args, ORPOConfig config, std::span<const data::PreferencePair> eval_pairs)
    : PairwiseTrainer(std::move(model), train_pairs, std::move(args), truncation_of(validated(config)),
                      config.disable_dropout, eval_pairs, "ORPOTrainer", Reference::None, 0),
      config_(std::move(config)) {}

json::Value ORPOTrainer::objective_config() const {
  return json::Value::object().set("ORPOConfig", config_.to_json());
}

}  // namespace tg::train
