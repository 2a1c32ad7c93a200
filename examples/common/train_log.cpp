#include "io/number.h"
#include "examples/common/train_log.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "io/file.h"

namespace examples {
namespace {

constexpr const char* kHeader = "phase,step,split,loss,lr,tokens_per_s";

std::string clock_str(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%02d:%02d", s / 60, s % 60);
  return buf;
}

}  // namespace

TrainLog::TrainLog(std::string label, int64_t total_steps, std::string csv_path, int64_t resume_step)
    : label_(std::move(label)),
      total_(total_steps),
      csv_path_(std::move(csv_path)),
      start_(std::chrono::steady_clock::now()),
      tty_(isatty(STDOUT_FILENO) != 0) {
  if (csv_path_.empty()) return;
  std::string kept = std::string(kHeader) + "\n";
  if (resume_step > 0) {  // the earlier run's rows up to the checkpoint
    std::ifstream in(csv_path_);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::stringstream ss(line);
      std::string phase, step, split, loss;
      if (!std::getline(ss, phase, ',') || !std::getline(ss, step, ',') || !std::getline(ss, split, ',') ||
          !std::getline(ss, loss, ','))
        continue;
      const std::optional<int64_t> s = tg::io::parse_integer<int64_t>(step);
      const std::optional<double> value = tg::io::parse_number(loss);
      if (!s || !value) continue;  // not a row this log wrote
      if (*s > resume_step) continue;
      points_.push_back({*s, *value, split == "train"});
      kept += line + "\n";
    }
  }
  tg::io::write_file_atomic(csv_path_, kept);
  csv_.open(csv_path_, std::ios::app);
  if (!csv_) throw std::runtime_error("cannot write the loss log " + csv_path_);
}

void TrainLog::start() {
  start_ = std::chrono::steady_clock::now();
  started_ = true;
}

void TrainLog::step(int64_t step, double loss, double lr, int64_t tokens) {
  if (!started_) start();
  last_loss_ = loss;
  ema_ = ema_ < 0 ? loss : 0.9 * ema_ + 0.1 * loss;
  points_.push_back({step, loss, true});
  tokens_ += tokens;
  ++steps_done_;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double tok_s = elapsed > 0 ? static_cast<double>(tokens_) / elapsed : 0;
  const double eta = elapsed / static_cast<double>(steps_done_) * static_cast<double>(total_ - step);
  if (csv_) csv_ << label_ << "," << step << ",train," << loss << "," << lr << "," << tok_s << "\n";
  // A live line on a terminal; in a log file, ten lines per run (and the first step's).
  const bool print = tty_ || step == total_ || steps_done_ == 1 || step % std::max<int64_t>(1, total_ / 10) == 0;
  if (!print) return;
  char line[256];
  std::snprintf(line, sizeof line,
                "%s step %5lld/%lld | loss %.4f smoothed, %.4f this step | lr %.2e | %7.0f tok/s | %s elapsed, ETA %s",
                label_.c_str(), static_cast<long long>(step), static_cast<long long>(total_), ema_, loss, lr, tok_s,
                clock_str(elapsed).c_str(), clock_str(eta).c_str());
  std::cout << (tty_ ? "\r" : "") << line << (tty_ ? "" : "\n") << std::flush;
}

void TrainLog::eval(int64_t step, const std::string& split, double loss) {
  points_.push_back({step, loss, false});
  if (csv_) csv_ << label_ << "," << step << "," << split << "," << loss << ",,\n" << std::flush;
  char line[160];
  std::snprintf(line, sizeof line, "%s step %5lld | %s loss %.4f", label_.c_str(), static_cast<long long>(step),
                split.c_str(), loss);
  note(line);
}

void TrainLog::note(const std::string& line) {
  if (tty_) std::cout << "\n";
  std::cout << line << "\n" << std::flush;
}

void TrainLog::finish() {
  if (tty_) std::cout << "\n";
  if (csv_) csv_.flush();
  write_svg();
}

void TrainLog::write_svg() const {
  if (csv_path_.empty() || points_.empty()) return;
  LossSeries train{"train (each step)", {}, false}, val{"validation", {}, true};
  for (const auto& p : points_) (p.train ? train : val).points.emplace_back(static_cast<double>(p.step), p.loss);
  std::string svg = csv_path_.substr(0, csv_path_.rfind('.')) + ".svg";
  write_loss_svg(svg, label_ + " loss", {train, val});
}

void write_loss_svg(const std::string& path, const std::string& title, const std::vector<LossSeries>& series) {
  const double W = 640, H = 400, L = 70, R = 20, T = 40, B = 50;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : series)
    for (auto [x, y] : s.points)
      if (std::isfinite(y)) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (x0 > x1) return;
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
  std::ostringstream os;
  os << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif'>\n"
     << "<rect width='100%' height='100%' fill='white'/>\n"
     << "<text x='" << W / 2 << "' y='24' text-anchor='middle' font-size='16'>" << title << "</text>\n"
     << "<line x1='" << L << "' y1='" << H - B << "' x2='" << W - R << "' y2='" << H - B << "' stroke='black'/>\n"
     << "<line x1='" << L << "' y1='" << T << "' x2='" << L << "' y2='" << H - B << "' stroke='black'/>\n";
  for (int i = 0; i <= 4; ++i) {
    double y = y0 + (y1 - y0) * i / 4, x = x0 + (x1 - x0) * i / 4;
    os << "<text x='" << L - 6 << "' y='" << Y(y) + 4 << "' text-anchor='end' font-size='11'>" << std::round(y * 100) / 100
       << "</text>\n<text x='" << X(x) << "' y='" << H - B + 16 << "' text-anchor='middle' font-size='11'>"
       << static_cast<long long>(std::round(x)) << "</text>\n";
  }
  os << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12 << "' text-anchor='middle' font-size='12'>optimizer step</text>\n"
     << "<text x='16' y='" << (T + H - B) / 2 << "' text-anchor='middle' font-size='12' transform='rotate(-90 16 "
     << (T + H - B) / 2 << ")'>loss (cross-entropy, nats per token)</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const auto& [name, pts, markers] = series[s];
    if (pts.empty()) continue;
    const char* color = colors[s % 4];
    os << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
    for (auto [x, y] : pts)
      if (std::isfinite(y)) os << X(x) << "," << Y(y) << " ";
    os << "'/>\n";
    if (markers)
      for (auto [x, y] : pts)
        if (std::isfinite(y)) os << "<circle cx='" << X(x) << "' cy='" << Y(y) << "' r='3.5' fill='" << color << "'/>\n";
    os << "<text x='" << W - R - 150 << "' y='" << T + 16 * (s + 1) << "' fill='" << color << "' font-size='12'>" << name
       << "</text>\n";
  }
  os << "</svg>\n";
  tg::io::write_file_atomic(path, os.str());
}

}  // namespace examples
