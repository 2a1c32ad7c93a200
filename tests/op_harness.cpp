#include "tests/op_harness.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/primitives.h"
#include "ops/shape.h"

namespace tg::test {
namespace {
std::vector<OpCase>& registry() {
  static std::vector<OpCase> cases;
  return cases;
}
}  // namespace

int register_op_cases(std::vector<OpCase> cases) {
  for (auto& c : cases) registry().push_back(std::move(c));
  return 0;
}

const std::vector<OpCase>& op_cases() { return registry(); }

const OpCase& op_case(const std::string& name) {
  for (const auto& c : registry())
    if (c.name == name) return c;
  throw Error("op_case: no case named " + name);
}

namespace {
// `text` without comments, preprocessor lines, or anything nested deeper than a namespace's top
// level (function bodies, structs, nested namespaces): what is left is the namespace's declarations.
std::string top_level_declarations(const std::string& text) {
  std::string out;
  int depth = 0;
  bool line_start = true;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (text.compare(i, 2, "//") == 0 || (line_start && ch == '#')) {
      i = std::min(text.find('\n', i), text.size()) - 1;  // to the end of the line
      continue;
    }
    if (text.compare(i, 2, "/*") == 0) {
      i = std::min(text.find("*/", i + 2), text.size()) + 1;
      continue;
    }
    if (ch != ' ' && ch != '\t') line_start = ch == '\n';
    if (ch == '{') {
      if (depth++ <= 1) out += ';';
    } else if (ch == '}') {
      --depth;
    } else if (depth == 1) {
      out += ch;
    }
  }
  return out;
}
}  // namespace

std::vector<std::string> public_op_functions(const std::string& ops_dir) {
  namespace fs = std::filesystem;
  std::set<std::string> names;
  const std::regex name_re(R"(\b(operator\s*[^\s(]+|[A-Za-z_]\w*)\s*\()");
  const std::regex skip_re(R"(^\s*(struct|class|enum|using|namespace)\b)");
  for (const auto& entry : fs::directory_iterator(ops_dir)) {
    const fs::path h = entry.path();
    if (h.extension() != ".h" || !fs::exists(fs::path(h).replace_extension(".cpp"))) continue;
    std::ifstream in(h);
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("namespace tg {") == std::string::npos) continue;
    std::stringstream decls(top_level_declarations(text.str()));
    std::string stmt;
    std::smatch m;
    while (std::getline(decls, stmt, ';'))
      if (!std::regex_search(stmt, skip_re) && std::regex_search(stmt, m, name_re)) names.insert(m[1]);
  }
  return {names.begin(), names.end()};
}

std::string op_of_case(const std::string& case_name, const std::vector<std::string>& functions) {
  std::string best;
  for (const auto& f : functions)
    if ((case_name == f || case_name.rfind(f + "_", 0) == 0) && f.size() > best.size()) best = f;
  return best;
}

Tensor make_input(const InputSpec& spec, Generator& gen, DType dtype, Device device) {
  Shape shape = spec.shape;
  if (spec.transposed) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  Tensor t;
  switch (spec.kind) {
    case InputSpec::Normal: t = randn(shape, gen, {dtype, device}); break;
    case InputSpec::Positive: t = uniform(shape, 0.5, 2.0, gen, {dtype, device}); break;
    case InputSpec::Index: t = randint(0, spec.high, shape, gen, {kInt64, device}); break;
    case InputSpec::Mask: t = randint(0, 2, shape, gen, {kBool, device}); break;
  }
  if (spec.transposed) t = transpose(t, -1, -2);
  if (spec.grad && (spec.kind == InputSpec::Normal || spec.kind == InputSpec::Positive)) t.requires_grad_(true);
  return t;
}

}  // namespace tg::test
