#include "train/grpo_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/generation/generation.h"
#include "peft/lora.h"
#include "train/detail/preference_step.h"
#include "train/preference_losses.h"
#include "train/train_log.h"

namespace tg::train {
namespace {

constexpr const char* kName = "GRPOTrainer";
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// TRL's nanstd: with Bessel's correction.
double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

// Where the loss counts: mask[b, t] = 1 where position t predicts a completion token (labels[b, t + 1]).
std::vector<float> loss_mask(const Tensor& labels) {
  const std::vector<int64_t> l = labels.to_vector<int64_t>();
  const int64_t B = labels.size(0), T = labels.size(1);
  std::vector<float> m(static_cast<size_t>(B * T), 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t) m[static_cast<size_t>(b * T + t)] = l[static_cast<size_t>(b * T + t + 1)] != -100;
  return m;
}

// The reference's (or the generating policy's) token log-probs: no gradient, nothing kept.
Tensor token_log_probs_without_grad(nn::CausalLM& model, const Tensor& ids, const Tensor& labels, double temperature,
                                    bool reference) {
  NoGradGuard no_grad;
  std::optional<peft::AdapterDisabled> base;
  if (reference) base.emplace(model);
  return model.token_log_probs(ids, labels, Tensor(), temperature);
}

}  // namespace

// One generation: its completions in micro-batches, what the loss needs of each, and its metrics.
struct GRPOTrainer::Rollout {
  struct Micro {
    Tensor ids, labels, mask;     // [B, T]; mask float32 where the loss counts
    Tensor old_logps, ref_logps;  // [B, T] (num_iterations > 1, beta > 0)
    std::vector<double> advantages;
    std::vector<int64_t> completion_tokens;
    int64_t tokens = 0;         // prompt and completion tokens
  };
  int64_t generation = -1;
  std::vector<Micro> micro;
  int64_t completion_tokens = 0;  // over all completions (dapo's normaliser)
  Metrics metrics;
};

GRPOTrainer::GRPOTrainer(std::shared_ptr<nn::CausalLM> model, const data::Tokenizer& tokenizer,
                         std::vector<data::PromptExample> prompts, std::vector<RewardFunction> reward_funcs,
                         TrainingArguments args, GRPOConfig config)
    : Trainer(std::move(model), std::move(args), kName),
      tokenizer_(tokenizer),
      prompts_(std::move(prompts)),
      rewards_(std::move(reward_funcs)),
      config_(std::move(config)) {
  config_.validate();
  TG_CHECK(!rewards_.empty(), kName, "no reward function (give at least one: a RewardFunction or train::rewards::...)");
  std::set<std::string> names;
  for (const RewardFunction& f : rewards_) {
    TG_CHECK(!f.name.empty() && f.fn, kName, "a reward function has ", f.name.empty() ? "no name" : "no callable",
             f.name.empty() ? "" : " ('" + f.name + "')");
    TG_CHECK(names.insert(f.name).second, kName, "two reward functions are named '", f.name, "' (their metrics would mix)");
  }
  TG_CHECK(config_.reward_weights.empty() || config_.reward_weights.size() == rewards_.size(), kName, "reward_weights has ",
           config_.reward_weights.size(), " weights for ", rewards_.size(), " reward functions");
  TG_CHECK(!prompts_.empty(), kName, "no prompts to train on");
  const int64_t completions = args_.per_device_train_batch_size * args_.gradient_accumulation_steps;
  TG_CHECK(completions % config_.num_generations == 0, kName, "a step's completions, per_device_train_batch_size ",
           args_.per_device_train_batch_size, " x gradient_accumulation_steps ", args_.gradient_accumulation_steps,
           " = ", completions, ", must be a multiple of num_generations ", config_.num_generations,
           " (each prompt's group is generated whole)");
  TG_CHECK(tokenizer_.eos_token_id().has_value(), kName, "the tokenizer (", tokenizer_.description(),
           ") has no EOS token to end the completions with");
  const int64_t context = model_->dims().context;
  for (const data::PromptExample& p : prompts_) {
    TG_CHECK(!p.ids.empty(), kName, p.where, ": the prompt has no tokens");
    TG_CHECK(static_cast<int64_t>(p.ids.size()) + config_.max_completion_length <= context, kName, p.where, ": the ",
             "prompt's ", p.ids.size(), " tokens and max_completion_length ", config_.max_completion_length,
             " pass the model's context ", context, " (", model_->dims().context_field, ")");
  }
  if (config_.beta > 0)
    detail::check_in_step_reference(kName, *model_, "beta 0 trains without the KL term");
}

GRPOTrainer::~GRPOTrainer() = default;

int64_t GRPOTrainer::train_rows() const { return static_cast<int64_t>(prompts_.size()) * config_.num_generations; }

std::string GRPOTrainer::describe_train_data() const {
  return std::to_string(prompts_.size()) + " prompts, " + std::to_string(config_.num_generations) +
         " completions each of at most " + std::to_string(config_.max_completion_length) + " tokens";
}

DataFingerprint GRPOTrainer::compute_train_fingerprint() const {
  int64_t longest = 0;
  for (const data::PromptExample& p : prompts_) longest = std::max(longest, static_cast<int64_t>(p.ids.size()));
  return fingerprint_rows(static_cast<int64_t>(prompts_.size()), longest, [&](int64_t first, int64_t n) {
    std::vector<int64_t> v;
    for (int64_t r = first; r < first + n; ++r) {
      const data::PromptExample& p = prompts_[static_cast<size_t>(r)];
      v.insert(v.end(), p.ids.begin(), p.ids.end());
      v.push_back(-1);  // the prompts' boundary
    }
    return v;
  });
}

json::Value GRPOTrainer::objective_config() const {
  json::Value names = json::Value::array();
  for (const RewardFunction& f : rewards_) names.push_back(f.name);
  return json::Value::object().set("GRPOConfig", config_.to_json()).set("reward_funcs", names);
}

std::string GRPOTrainer::cuda_graph_blocker() const { return "the GRPOTrainer generates between its steps"; }

std::unique_ptr<GRPOTrainer::Rollout> GRPOTrainer::generate_and_score(int64_t generation) {
  const int64_t G = config_.num_generations, B = args_.per_device_train_batch_size;
  const int64_t completions = B * args_.gradient_accumulation_steps, P = completions / G;
  const std::vector<int64_t> rows =
      order_.batch(generation, P, static_cast<int64_t>(prompts_.size()), static_cast<uint64_t>(args_.seed), kName);
  std::vector<std::vector<int32_t>> inputs;
  for (int64_t r : rows)
    for (int64_t g = 0; g < G; ++g) inputs.push_back(prompts_[static_cast<size_t>(r)].ids);
  const int32_t eos = *tokenizer_.eos_token_id();
  nn::GenerationConfig gen{.max_new_tokens = config_.max_completion_length,
                           .do_sample = true,
                           .temperature = config_.temperature,
                           .top_k = config_.top_k,
                           .top_p = config_.top_p,
                           .repetition_penalty = config_.repetition_penalty,
                           .eos_token_id = {eos},
                           // a generation's own draws: the same after a resume
                           .seed = static_cast<uint64_t>(args_.seed) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(generation)};
  const std::vector<std::vector<int32_t>> out = nn::generate(*model_, inputs, gen);

  // Rewards: each function on each completion, then their weighted sum.
  const size_t F = rewards_.size(), N = out.size();
  std::vector<std::vector<double>> per_function(F, std::vector<double>(N));
  std::vector<double> reward(N, 0.0), lengths;
  std::vector<data::Completion> seqs(N);
  int64_t truncated = 0;
  for (size_t i = 0; i < N; ++i) {
    const data::PromptExample& prompt = prompts_[static_cast<size_t>(rows[i / static_cast<size_t>(G)])];
    const std::span<const int32_t> ids(out[i].begin() + static_cast<std::ptrdiff_t>(prompt.ids.size()), out[i].end());
    const bool terminated = !ids.empty() && ids.back() == eos;
    truncated += !terminated;
    lengths.push_back(static_cast<double>(ids.size()));
    const std::string text = tokenizer_.decode(ids, /*skip_special_tokens=*/true);
    for (size_t f = 0; f < F; ++f) {
      double r = 0;
      const std::string where = "reward function '" + rewards_[f].name + "' on " + prompt.where + " (prompt row " +
                                std::to_string(rows[i / static_cast<size_t>(G)]) + "), completion " +
                                std::to_string(i % static_cast<size_t>(G)) + " of " + std::to_string(G);
      try {
        r = rewards_[f].fn(RewardInput{prompt, text, ids, terminated});
      } catch (const std::exception& e) {
        fail(kName, where, " threw: ", e.what());
      }
      TG_CHECK(std::isfinite(r), kName, where, " returned ", r, " (a reward must be a finite number)");
      per_function[f][i] = r;
      reward[i] += r * (config_.reward_weights.empty() ? 1.0 : config_.reward_weights[f]);
    }
    seqs[i] = {out[i], static_cast<int64_t>(prompt.ids.size())};
    if (config_.mask_truncated_completions && !terminated) seqs[i].prompt_tokens = static_cast<int64_t>(out[i].size());
  }

  int64_t zero_std = 0;
  const std::vector<double> advantages = grpo_advantages(config_, reward, zero_std);

  auto rollout = std::make_unique<Rollout>();
  rollout->generation = generation;
  Metrics& m = rollout->metrics;
  m["reward"] = mean_of(reward);
  m["reward_std"] = std_of(reward);
  m["frac_reward_zero_std"] = static_cast<double>(zero_std) / static_cast<double>(N);
  for (size_t f = 0; f < F; ++f) {
    m["rewards/" + rewards_[f].name + "/mean"] = mean_of(per_function[f]);
    m["rewards/" + rewards_[f].name + "/std"] = std_of(per_function[f]);
  }
  m["completions/mean_length"] = mean_of(lengths);
  m["completions/min_length"] = *std::min_element(lengths.begin(), lengths.end());
  m["completions/max_length"] = *std::max_element(lengths.begin(), lengths.end());
  m["completions/clipped_ratio"] = static_cast<double>(truncated) / static_cast<double>(N);

  for (size_t k0 = 0; k0 < N; k0 += static_cast<size_t>(B)) {
    Rollout::Micro mb;
    std::vector<const data::Completion*> part;
    for (size_t i = k0; i < k0 + static_cast<size_t>(B); ++i) {
      part.push_back(&seqs[i]);
      mb.advantages.push_back(advantages[i]);
      mb.completion_tokens.push_back(seqs[i].predicted());
      mb.tokens += static_cast<int64_t>(seqs[i].ids.size());
      rollout->completion_tokens += seqs[i].predicted();
    }
    std::tie(mb.ids, mb.labels) = data::padded_rows(part, 0, device_);
    mb.mask = from_vector(loss_mask(mb.labels), mb.ids.shape(), device_);
    if (config_.num_iterations > 1)
      mb.old_logps = token_log_probs_without_grad(*model_, mb.ids, mb.labels, config_.temperature, false);
    if (config_.beta > 0)
      mb.ref_logps = token_log_probs_without_grad(*model_, mb.ids, mb.labels, config_.temperature, true);
    rollout->micro.push_back(std::move(mb));
  }
  return rollout;
}

Tensor GRPOTrainer::micro_batch_loss(const Rollout& rollout, size_t k, Metrics& metrics) {
  const Rollout::Micro& mb = rollout.micro[k];
  PreferenceLoss l = grpo_loss(config_, {.logps = model_->token_log_probs(mb.ids, mb.labels, Tensor(), config_.temperature),
                                         .old_logps = mb.old_logps,
                                         .ref_logps = mb.ref_logps,
                                         .mask = mb.mask,
                                         .advantages = mb.advantages,
                                         .completion_tokens = mb.completion_tokens,
                                         .step_tokens = rollout.completion_tokens});
  metrics = l.metrics;
  return l.loss;
}

Trainer::StepResult GRPOTrainer::run_step(int64_t step) {
  TG_CHECK(world_ == 1, kName, "data parallelism is not implemented for GRPO yet: run one process");
  const int64_t generation = (step - 1) / config_.num_iterations;
  StepResult r;
  if (!rollout_ || rollout_->generation != generation) {
    if ((step - 1) % config_.num_iterations != 0 && main_process())
      train_log().note("step " + std::to_string(step) + " is inside a generation's num_iterations steps (a resumed "
                       "run): its completions are sampled again from the resumed weights");
    const Clock::time_point t0 = Clock::now();
    rollout_ = generate_and_score(generation);
    r.metrics = rollout_->metrics;
    r.metrics["generation_seconds"] = seconds_since(t0);
  }
  const Clock::time_point t0 = Clock::now();
  detail::MetricMeans means;
  const size_t micro = rollout_->micro.size();
  const double weight = config_.loss_type == "dapo" ? 1.0 : 1.0 / static_cast<double>(micro);
  const std::vector<Tensor> out = optimizer_step(
      micro,
      [&](size_t k) {
        Metrics m;
        Tensor loss = micro_batch_loss(*rollout_, k, m);
        means.add(m);
        return loss;
      },
      [&](size_t) { return weight; });
  r.loss = 0;
  for (size_t k = 0; k < micro; ++k) r.loss += out[k].item() * weight;
  r.grad_norm = out.back();
  for (const auto& [name, v] : means.means()) r.metrics[name] = v;
  r.metrics["training_seconds"] = seconds_since(t0);
  for (const Rollout::Micro& mb : rollout_->micro) r.tokens += mb.tokens;
  return r;
}

}  // namespace tg::train
