#include "nn/models/config_fields.h"

#include <cmath>

#include "core/error.h"

namespace tg::nn {

const json::Value* ConfigFields::get(const std::string& key) const {
  const json::Value* f = v_.find(key);
  return f && !f->is_null() ? f : nullptr;
}

int64_t ConfigFields::integer(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
  const json::Value* f = get(key);
  if (f && !(f->is_int() && f->as_int() >= lo && f->as_int() <= hi))
    bad(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return f ? f->as_int() : fallback;
}

double ConfigFields::number(const std::string& key, double fallback, double lo, double hi) const {
  const json::Value* f = get(key);
  if (f && !(f->is_number() && std::isfinite(f->as_double()) && f->as_double() >= lo && f->as_double() <= hi))
    bad(key, "a finite number in [" + json::dump(lo) + ", " + (std::isinf(hi) ? "inf" : json::dump(hi)) + "]");
  return f ? f->as_double() : fallback;
}

double ConfigFields::probability(const std::string& key, double fallback) const {
  const double p = number(key, fallback, 0, 1);
  if (p == 1) bad(key, "a probability in [0, 1)");
  return p;
}

bool ConfigFields::boolean(const std::string& key, bool fallback) const {
  const json::Value* f = get(key);
  if (f && !f->is_bool()) bad(key, "true or false");
  return f ? f->as_bool() : fallback;
}

std::string ConfigFields::string(const std::string& key, const std::string& fallback) const {
  const json::Value* f = get(key);
  if (f && !f->is_string()) bad(key, "a string");
  return f ? f->as_string() : fallback;
}

void ConfigFields::unsupported(const std::string& key, const std::string& wanted) const {
  fail("from_pretrained", "'", source_, "': ", key, " = ", json::dump(v_.find(key) ? *v_.find(key) : json::Value()),
       " is not supported (", wanted, ")");
}

void ConfigFields::bad(const std::string& key, const std::string& wanted) const {
  fail("from_pretrained", "'", source_, "': ", key, " is ", json::dump(*v_.find(key)), ", wants ", wanted);
}

void read_rope(const ConfigFields& f, const std::string& key, const json::Value& r, double& theta,
               RopeScaling& scaling, int64_t max_position_embeddings) {
  auto unsupported = [&](const std::string& wanted) {
    fail("from_pretrained", "'", f.source(), "': ", key, " = ", json::dump(r), " is not supported (", wanted, ")");
  };
  if (!r.is_object()) unsupported("wants an object with rope_type");
  const json::Value* type = r.find("rope_type");
  if (!type) type = r.find("type");
  const std::string rope_type = type && type->is_string() ? type->as_string() : "default";
  if (type && !type->is_string()) unsupported("rope_type wants a string");
  if (rope_type != "default" && rope_type != "linear" && rope_type != "dynamic" && rope_type != "llama3" &&
      rope_type != "yarn" && rope_type != "longrope")
    unsupported("rope_type \"" + rope_type + "\" is not implemented (default, linear, dynamic, llama3, yarn, longrope)");
  auto field = [&](const char* name) {
    const json::Value* v = r.find(name);
    return v && !v->is_null() ? v : nullptr;
  };
  auto number = [&](const char* name, double fallback, double lo) {
    const json::Value* v = field(name);
    if (!v) return fallback;
    if (!v->is_number() || !std::isfinite(v->as_double()) || v->as_double() < lo)
      fail("from_pretrained", "'", f.source(), "': ", key, ".", name, " is ", json::dump(*v),
           ", wants a finite number >= ", lo);
    return v->as_double();
  };
  auto numbers = [&](const char* name) {
    const json::Value* v = field(name);
    std::vector<double> out;
    bool ok = v && v->is_array();
    for (size_t i = 0; ok && i < v->size(); ++i) {
      const json::Value& x = v->as_array()[i];
      ok = x.is_number() && std::isfinite(x.as_double()) && x.as_double() > 0;
      if (ok) out.push_back(x.as_double());
    }
    if (!ok)
      fail("from_pretrained", "'", f.source(), "': ", key, ".", name, " is ", v ? json::dump(*v) : "missing",
           ", wants a list of positive numbers");
    return out;
  };
  theta = number("rope_theta", theta, 1e-300);
  scaling = RopeScaling{.rope_type = rope_type};
  // In rope_parameters (transformers 5), else beside it (Phi-3's config.json).
  scaling.partial_rotary_factor = number("partial_rotary_factor", f.number("partial_rotary_factor", 1.0), 1e-300);
  if (rope_type == "default") return;
  const bool derived_factor = rope_type == "yarn" || rope_type == "longrope";  // null: the context's growth
  scaling.factor = number("factor", derived_factor ? 0.0 : 1.0, 1.0);
  if (rope_type == "linear" || rope_type == "dynamic") return;
  // transformers' standardize_rope_params: a top-level original_max_position_embeddings wins.
  const double original = number("original_max_position_embeddings", static_cast<double>(max_position_embeddings), 1);
  if (original > static_cast<double>(ConfigFields::kMaxSize) || original != std::floor(original))
    fail("from_pretrained", "'", f.source(), "': ", key, ".original_max_position_embeddings is ", json::dump(original),
         ", wants an integer in [1, ", ConfigFields::kMaxSize, "]");
  scaling.original_max_position_embeddings =
      f.integer("original_max_position_embeddings", static_cast<int64_t>(original));
  if (rope_type == "llama3") {
    scaling.low_freq_factor = number("low_freq_factor", 1.0, 1e-300);
    scaling.high_freq_factor = number("high_freq_factor", 4.0, 1e-300);
    if (const json::Value* a = field("attention_factor"); a && !(a->is_number() && a->as_double() == 1))
      fail("from_pretrained", "'", f.source(), "': ", key, ".attention_factor is ", json::dump(*a),
           ", not supported (wants 1)");
    return;
  }
  scaling.attention_factor = number("attention_factor", 0.0, 1e-300);
  if (rope_type == "longrope") {
    scaling.short_factor = numbers("short_factor");
    scaling.long_factor = numbers("long_factor");
    return;
  }
  // yarn; transformers reads 0 as unset (`or 32`).
  scaling.beta_fast = number("beta_fast", 0, 0);
  scaling.beta_slow = number("beta_slow", 0, 0);
  if (scaling.beta_fast == 0) scaling.beta_fast = 32;
  if (scaling.beta_slow == 0) scaling.beta_slow = 1;
  scaling.mscale = number("mscale", 0, 0);
  scaling.mscale_all_dim = number("mscale_all_dim", 0, 0);
  if (const json::Value* t = field("truncate")) {
    if (!t->is_bool())
      fail("from_pretrained", "'", f.source(), "': ", key, ".truncate is ", json::dump(*t), ", wants true or false");
    scaling.truncate = t->as_bool();
  }
}

std::vector<std::string> read_layer_types(const ConfigFields& f, int64_t layers) {
  std::vector<std::string> types;
  const json::Value* t = f.get("layer_types");
  if (!t) return types;
  if (!t->is_array()) f.bad("layer_types", "a list of \"sliding_attention\" / \"full_attention\"");
  for (const json::Value& l : t->as_array()) {
    if (!l.is_string() || (l.as_string() != "sliding_attention" && l.as_string() != "full_attention"))
      f.unsupported("layer_types", "wants each entry \"sliding_attention\" or \"full_attention\"");
    types.push_back(l.as_string());
  }
  if (static_cast<int64_t>(types.size()) != layers)
    f.bad("layer_types", "one entry per layer (num_hidden_layers " + std::to_string(layers) + ")");
  return types;
}

void refuse_partial_rotary(const ConfigFields& f, const RopeScaling& s) {
  if (s.partial_rotary_factor != 1.0)
    fail("from_pretrained", "'", f.source(), "': partial_rotary_factor = ", json::dump(s.partial_rotary_factor),
         " is not supported (wants 1.0: this family rotates whole heads)");
}

json::Value rope_json(double theta, const RopeScaling& s) {
  json::Value r = json::Value::object().set("rope_theta", theta).set("rope_type", s.rope_type);
  if (s.partial_rotary_factor != 1.0) r.set("partial_rotary_factor", s.partial_rotary_factor);
  if (s.rope_type == "default") return r;
  // Optional fields only where they are not their defaults: the object transformers reads back
  // is then the one it read.
  if (s.factor > 0) r.set("factor", s.factor);
  if (s.rope_type == "linear" || s.rope_type == "dynamic") return r;
  r.set("original_max_position_embeddings", s.original_max_position_embeddings);
  if (s.rope_type == "llama3") return r.set("low_freq_factor", s.low_freq_factor).set("high_freq_factor", s.high_freq_factor);
  if (s.attention_factor > 0) r.set("attention_factor", s.attention_factor);
  auto list = [](const std::vector<double>& xs) {
    json::Value a = json::Value::array({});
    for (double x : xs) a.push_back(x);
    return a;
  };
  if (s.rope_type == "longrope") return r.set("short_factor", list(s.short_factor)).set("long_factor", list(s.long_factor));
  if (s.beta_fast != 32) r.set("beta_fast", s.beta_fast);
  if (s.beta_slow != 1) r.set("beta_slow", s.beta_slow);
  if (!s.truncate) r.set("truncate", false);
  if (s.mscale > 0) r.set("mscale", s.mscale);
  if (s.mscale_all_dim > 0) r.set("mscale_all_dim", s.mscale_all_dim);
  return r;
}

}  // namespace tg::nn
