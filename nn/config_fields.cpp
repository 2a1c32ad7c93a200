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

}  // namespace tg::nn
