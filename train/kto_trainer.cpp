#include "train/kto_trainer.h"

#include <algorithm>
#include <numeric>

#include "core/autograd.h"
#include "train/detail/preference_step.h"

namespace tg::train {
namespace {

constexpr const char* kName = "KTOTrainer";

std::vector<int64_t> rows_from(int64_t first, int64_t end) {
  std::vector<int64_t> rows(static_cast<size_t>(end - first));
  std::iota(rows.begin(), rows.end(), first);
  return rows;
}

}  // namespace

KTOTrainer::KTOTrainer(std::shared_ptr<nn::CausalLM> model, std::span<const data::UnpairedExample> train_examples,
                       TrainingArguments args, KTOConfig config, std::span<const data::UnpairedExample> eval_examples)
    : Trainer(std::move(model), std::move(args), kName),
      config_(std::move(config)),
      train_((config_.validate(), train_examples), truncation_of(config_)),
      eval_(eval_examples, truncation_of(config_)) {
  const bool kl = config_.loss_type == "kto";
  TG_CHECK(!kl || args_.per_device_train_batch_size > 1, kName, "per_device_train_batch_size must be > 1 for ",
           "loss_type 'kto': the KL estimate pairs the batch's prompts with its other completions (with one ",
           "example it would be the example's own reward)");
  TG_CHECK(train_.rows() > 0, kName, "no training examples (", train_examples.size(), " given, ", train_.dropped(),
           " left out: their prompt fills max_length ", config_.max_length, ")");
  const int64_t context = model_->dims().context, longest = std::max(train_.longest(), eval_.longest());
  TG_CHECK(longest <= context, kName, "an example has ", longest, " tokens, the model's context is ", context, " (",
           model_->dims().context_field, "): set max_length to at most ", context);
  if (config_.disable_dropout) detail::disable_dropout(*model_);
  if (kl)
    detail::check_in_step_reference(kName, *model_, "the KL rows pair each batch's completions anew, so their "
                                    "reference is computed in the step; loss_type 'apo_zero_unpaired' has no KL term");
  else if (!config_.precompute_ref_log_probs)
    detail::check_in_step_reference(kName, *model_, "set precompute_ref_log_probs to compute it once from the model "
                                                    "as given");
  if (config_.precompute_ref_log_probs) {
    const int64_t n = config_.precompute_ref_batch_size;
    train_reference_ = precompute(train_, n > 0 ? n : args_.per_device_train_batch_size);
    eval_reference_ = precompute(eval_, n > 0 ? n : args_.per_device_eval_batch_size);
  }
}

std::vector<double> KTOTrainer::precompute(const data::UnpairedPreferenceDataset& examples, int64_t batch_size) {
  std::vector<double> table;
  for (int64_t first = 0; first < examples.rows(); first += batch_size) {
    const data::UnpairedBatch b = examples.rows_batch(rows_from(first, std::min(examples.rows(), first + batch_size)), device_);
    for (double v : detail::reference_log_probs(*model_, b.ids, b.labels).to_vector<double>()) table.push_back(v);
  }
  return table;
}

Tensor KTOTrainer::batch_loss(const data::UnpairedBatch& b, const std::vector<double>& table, Metrics& metrics) {
  UnpairedLogProbs lp{.logps = detail::completion_log_probs(*model_, b.ids, b.labels), .desirable = b.desirable};
  lp.ref_logps = config_.precompute_ref_log_probs ? detail::gather_values(table, b.rows, device_)
                                                  : detail::reference_log_probs(*model_, b.ids, b.labels);
  if (config_.loss_type == "kto") {  // TRL's estimate: no gradient, clamped at 0
    Tensor policy;
    {
      NoGradGuard no_grad;
      policy = detail::completion_log_probs(*model_, b.kl_ids, b.kl_labels);
    }
    const std::vector<double> p = policy.to_vector<double>(),
                              ref = detail::reference_log_probs(*model_, b.kl_ids, b.kl_labels).to_vector<double>();
    double sum = 0;
    for (size_t i = 0; i < p.size(); ++i) sum += p[i] - ref[i];
    lp.kl = std::max(0.0, sum / static_cast<double>(p.size()));
  }
  PreferenceLoss l = kto_loss(config_, lp);
  metrics = std::move(l.metrics);
  return l.loss;
}

Trainer::StepResult KTOTrainer::run_step(int64_t step) {
  TG_CHECK(world_ == 1, kName, "data parallelism is not implemented for preference training yet: run one process");
  const std::vector<data::UnpairedBatch> micro = detail::micro_batches(train_, step, args_, device_);
  StepResult r = mean_step(micro.size(), [&](size_t k, Metrics& m) { return batch_loss(micro[k], train_reference_, m); });
  for (const data::UnpairedBatch& b : micro) r.tokens += b.tokens;
  return r;
}

LogEntry KTOTrainer::evaluate(const std::string& prefix) {
  TG_CHECK(eval_.rows() > 0, kName, "evaluate: no eval examples (pass them to the constructor)");
  auto loss_of = [&](std::span<const int64_t> rows, Metrics& m) {
    return batch_loss(eval_.rows_batch(rows, device_), eval_reference_, m);
  };
  return evaluate_rows(eval_.rows(), loss_of, prefix);
}

void KTOTrainer::evaluate_in_training() {
  if (eval_.rows() > 0) evaluate();
}

std::string KTOTrainer::describe_train_data() const {
  std::string s = std::to_string(train_.rows()) + " examples, " + std::to_string(train_.desirable()) +
                  " desirable (the longest " + std::to_string(train_.longest()) + " tokens";
  if (train_.dropped() > 0) s += "; " + std::to_string(train_.dropped()) + " left out: their prompt fills max_length";
  return s + ")";
}

DataFingerprint KTOTrainer::compute_train_fingerprint() const {
  return fingerprint_rows(train_.rows(), train_.longest(), [&](int64_t first, int64_t n) {
    std::vector<int64_t> v;
    for (int64_t r = first; r < first + n; ++r) {
      const data::Completion& c = train_.sequence(r);
      v.push_back(train_.label(r));
      v.push_back(c.prompt_tokens);
      v.insert(v.end(), c.ids.begin(), c.ids.end());
    }
    return v;
  });
}

json::Value KTOTrainer::objective_config() const { return json::Value::object().set("KTOConfig", config_.to_json()); }

std::string KTOTrainer::cuda_graph_blocker() const {
  return "the KTOTrainer's batches are as long as their longest example, step by step";
}

}  // namespace tg::train
