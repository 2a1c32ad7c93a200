#include "nn/config_fields.h"

#include <cmath>

#include "core/error.h"

namespace tg::nn {

const json::Value* ConfigFields::get(const std::string& key) const {
  const json::Value* f = v_.find(key);
  return f && !f->is_null() ? f : nullptr;
}

int64_t ConfigFields::integer(const std::string& key, int64_t fallback, int64_t lo) const {
  const json::Value* f = get(key);
  if (f && !(f->is_int() && f->as_int() >= lo && f->as_int() <= kMaxSize))
    bad(key, "an integer in [" + std::to_string(lo) + ", " + std::to_string(kMaxSize) + "]");
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
               RopeScaling& scaling) {
  auto unsupported = [&](const std::string& wanted) {
    fail("from_pretrained", "'", f.source(), "': ", key, " = ", json::dump(r), " is not supported (", wanted, ")");
  };
  if (!r.is_object()) unsupported("wants an object with rope_type");
  const json::Value* type = r.find("rope_type");
  if (!type) type = r.find("type");
  const std::string rope_type = type && type->is_string() ? type->as_string() : "default";
  if (type && !type->is_string()) unsupported("rope_type wants a string");
  if (rope_type != "default" && rope_type != "linear" && rope_type != "dynamic" && rope_type != "llama3")
    unsupported("rope_type \"" + rope_type + "\" is not implemented (default, linear, dynamic, llama3)");
  auto number = [&](const char* field, double fallback, double lo) {
    const json::Value* v = r.find(field);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number() || !std::isfinite(v->as_double()) || v->as_double() < lo)
      fail("from_pretrained", "'", f.source(), "': ", key, ".", field, " is ", json::dump(*v),
           ", wants a finite number >= ", lo);
    return v->as_double();
  };
  theta = number("rope_theta", theta, 1e-300);
  scaling = RopeScaling{.rope_type = rope_type};
  if (rope_type == "default") return;
  scaling.factor = number("factor", 1.0, 1.0);
  if (rope_type != "llama3") return;
  scaling.low_freq_factor = number("low_freq_factor", 1.0, 1e-300);
  scaling.high_freq_factor = number("high_freq_factor", 4.0, 1e-300);
  scaling.original_max_position_embeddings = static_cast<int64_t>(number("original_max_position_embeddings", 8192, 1));
  if (const json::Value* a = r.find("attention_factor"); a && !a->is_null() && !(a->is_number() && a->as_double() == 1))
    fail("from_pretrained", "'", f.source(), "': ", key, ".attention_factor is ", json::dump(*a),
         ", not supported (wants 1)");
}

json::Value rope_json(double theta, const RopeScaling& s) {
  json::Value r = json::Value::object().set("rope_theta", theta).set("rope_type", s.rope_type);
  if (s.rope_type == "default") return r;
  r.set("factor", s.factor);
  if (s.rope_type == "llama3")
    r.set("low_freq_factor", s.low_freq_factor)
        .set("high_freq_factor", s.high_freq_factor)
        .set("original_max_position_embeddings", s.original_max_position_embeddings);
  return r;
}

}  // namespace tg::nn
