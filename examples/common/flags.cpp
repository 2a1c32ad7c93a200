#include "examples/common/flags.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "io/number.h"

namespace examples {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// transformers' TrainingArguments, peft's LoraConfig, TRL's SFTConfig and the usual training
// scripts' spellings of our flags (and of a flag with its value). Names that differ only by "_"
// for "-" are found without a line here.
const std::pair<const char*, const char*> kForeignNames[] = {
    {"learning_rate", "lr"}, {"per_device_train_batch_size", "batch"}, {"train_batch_size", "batch"},
    {"batch_size", "batch"}, {"micro_batch_size", "batch"}, {"gradient_accumulation_steps", "grad-accum"},
    {"max_steps", "steps"}, {"output_dir", "out"}, {"num_train_epochs", "num-train-epochs"},
    {"num_epochs", "num-train-epochs"}, {"epochs", "num-train-epochs"}, {"lora_r", "rank"}, {"r", "rank"},
    {"lora_rank", "rank"}, {"lora_alpha", "alpha"}, {"lora_dropout", "dropout"}, {"max_seq_length", "seq"},
    {"max_length", "seq"}, {"sequence_len", "seq"}, {"warmup_steps", "warmup"}, {"lr_scheduler_type", "lr-scheduler"},
    {"max_grad_norm", "clip"}, {"logging_steps", "log-every"}, {"eval_steps", "eval-every"},
    {"save_steps", "save-every"}, {"resume_from_checkpoint", "resume"}, {"model_name_or_path", "base"},
    {"base_model", "base"}, {"dataset", "data"}, {"dataset_name", "data"}, {"train_file", "data"},
    {"validation_file", "val"}, {"target_modules", "targets"}, {"lora_target_modules", "targets"},
    {"bf16", "dtype bf16"}, {"fp32", "dtype f32"}, {"torch_dtype", "dtype"}, {"use_cpu", "device cpu"},
    {"no_cuda", "device cpu"}, {"packing", "layout pack-separate"}, {"model_name_or_path", "model"},
    {"adapter_name_or_path", "adapter"}, {"lora_path", "adapter"}};

std::string dashed(std::string s) {
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

}  // namespace

const char* const kSeeHelp = "see --help for the flags\n";

std::string Flags::nearest(const std::string& name) const {
  for (const auto& [foreign, ours] : kForeignNames) {
    const std::string flag = std::string(ours).substr(0, std::string(ours).find(' '));
    if (name == foreign && flags_.count(flag)) return ours;
  }
  const std::string wanted = dashed(name);
  if (flags_.count(wanted)) return wanted;
  std::string best;
  size_t best_d = std::max<size_t>(2, wanted.size() / 3) + 1;  // further than this is no suggestion
  for (const auto& n : order_) {
    const size_t d = n.find(wanted) == 0 || wanted.find(n) == 0 ? 1 : edit_distance(wanted, n);
    if (d < best_d) best_d = d, best = n;
  }
  return best;
}

Flags& Flags::add(const std::string& name, const std::string& default_value, const std::string& help) {
  flags_[name] = {default_value, default_value, help, false};
  order_.push_back(name);
  return *this;
}

bool Flags::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return false;
    if (arg.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + arg + "'\n");
    std::string name = arg.substr(2), value;
    auto eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (!flags_.count(name)) {
      const std::string guess = nearest(name);
      throw UsageError("unknown flag --" + name + (guess.empty() ? "" : " (did you mean --" + guess + "?)") + "\n");
    }
    if (eq == std::string::npos) {
      const std::string& d = flags_[name].default_value;
      bool boolean = d == "false" || d == "true";
      if (boolean && (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)) {
        value = "true";  // a bare boolean flag
      } else {
        if (i + 1 >= argc) throw UsageError("flag --" + name + " needs a value\n");
        value = argv[++i];
      }
    }
    flags_[name].value = value;
    flags_[name].set = true;
  }
  return true;
}

const Flags::Flag& Flags::get(const std::string& name) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) throw std::logic_error("flag --" + name + " was never declared");
  return it->second;
}

std::string Flags::str(const std::string& name) const { return get(name).value; }

int64_t Flags::integer(const std::string& name, int64_t min, int64_t max) const {
  const std::string& v = get(name).value;
  const std::optional<int64_t> n = tg::io::parse_integer<int64_t>(v);
  const std::string range = min == INT64_MIN && max == INT64_MAX ? ""
                            : max == INT64_MAX ? " of at least " + std::to_string(min)
                                               : " in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (!n || *n < min || *n > max)
    throw UsageError("--" + name + " wants an integer" + range + ", got '" + v + "'\n");
  return *n;
}

double Flags::number(const std::string& name, double min, double max) const {
  const std::string& v = get(name).value;
  const std::optional<double> x = tg::io::parse_number(v);
  std::ostringstream range;
  if (min != -HUGE_VAL || max != HUGE_VAL) {
    range << " in [" << min << ", ";
    if (max == HUGE_VAL) range << "inf)";
    else range << max << "]";
  }
  if (!x || *x < min || *x > max)
    throw UsageError("--" + name + " wants a finite number" + range.str() + ", got '" + v + "'\n");
  return *x;
}

bool Flags::boolean(const std::string& name) const {
  const std::string& v = get(name).value;
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw UsageError("--" + name + " wants true or false, got '" + v + "'\n");
}

std::vector<std::string> Flags::list(const std::string& name) const {
  std::vector<std::string> out;
  std::stringstream ss(get(name).value);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

bool Flags::was_set(const std::string& name) const { return get(name).set; }

std::string Flags::usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [flags]\n" << about_ << "\n\nflags:\n";
  for (const auto& name : order_) {
    const Flag& f = flags_.at(name);
    os << "  --" << name << " (default: " << (f.default_value.empty() ? "\"\"" : f.default_value) << ")\n      "
       << f.help << "\n";
  }
  return os.str();
}

int guarded_main(int argc, char** argv, int (*run)(int, char**)) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << e.what() << kSeeHelp;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace examples
