#include "train/callbacks.h"

#include <cmath>

#include "core/error.h"
#include "io/json.h"

namespace tg::train {

double LogEntry::at(const std::string& key) const {
  auto it = values.find(key);
  TG_CHECK(it != values.end(), "LogEntry", "step ", step, " has no '", key, "'");
  return it->second;
}

std::string LogEntry::json() const {
  json::Value v = json::Value::object();
  v.set("step", step);
  for (const auto& [k, x] : values) v.set(k, std::isfinite(x) ? json::Value(x) : json::Value());
  return json::dump(v);
}

}  // namespace tg::train
