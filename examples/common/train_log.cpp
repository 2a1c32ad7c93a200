#include "examples/common/train_log.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace examples {
namespace {

std::string clock_str(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%02d:%02d", s / 60, s % 60);
  return buf;
}

}  // namespace

TrainLog::TrainLog(std::string label, int64_t total_steps, int64_t tokens_per_step, std::string csv_path, bool append)
    : label_(std::move(label)),
      total_(total_steps),
      tokens_per_step_(tokens_per_step),
      csv_path_(std::move(csv_path)),
      start_(std::chrono::steady_clock::now()),
      tty_(isatty(STDOUT_FILENO) != 0) {
  if (!csv_path_.empty()) {
    csv_.open(csv_path_, append ? std::ios::app : std::ios::trunc);
    if (!csv_) throw std::runtime_error("cannot write the loss log " + csv_path_);
    if (!append) csv_ << "phase,step,split,loss,lr,tokens_per_s\n";
  }
}

void TrainLog::step(int64_t step, double loss, double lr) {
  if (first_step_ < 0) {
    first_step_ = step - 1;
    start_ = std::chrono::steady_clock::now();
  }
  last_loss_ = loss;
  ema_ = ema_ < 0 ? loss : 0.9 * ema_ + 0.1 * loss;
  points_.push_back({step, loss, true});
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  int64_t done = step - first_step_;
  double tok_s = elapsed > 0 ? static_cast<double>(done * tokens_per_step_) / elapsed : 0;
  double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - step) : 0;
  if (csv_) csv_ << label_ << "," << step << ",train," << loss << "," << lr << "," << tok_s << "\n";
  // A live line on a terminal; in a log file, ten lines per run.
  bool print = tty_ || step == total_ || step % std::max<int64_t>(1, total_ / 10) == 0;
  if (!print) return;
  char line[200];
  std::snprintf(line, sizeof line, "%s step %5lld/%lld | loss %.4f | lr %.2e | %7.0f tok/s | %s elapsed, ETA %s",
                label_.c_str(), static_cast<long long>(step), static_cast<long long>(total_), ema_, lr, tok_s,
                clock_str(elapsed).c_str(), clock_str(eta).c_str());
  std::cout << (tty_ ? "\r" : "") << line << (tty_ ? "" : "\n") << std::flush;
}

void TrainLog::eval(int64_t step, const std::string& split, double loss) {
  points_.push_back({step, loss, false});
  if (csv_) csv_ << label_ << "," << step << "," << split << "," << loss << ",,\n" << std::flush;
  if (tty_) std::cout << "\n";
  std::printf("%s step %5lld | %s loss %.4f\n", label_.c_str(), static_cast<long long>(step), split.c_str(), loss);
}

void TrainLog::finish() {
  if (tty_) std::cout << "\n";
  if (csv_) csv_.flush();
  write_svg();
}

void TrainLog::write_svg() const {
  if (csv_path_.empty() || points_.empty()) return;
  std::vector<std::pair<double, double>> train, val;
  for (const auto& p : points_) (p.train ? train : val).emplace_back(static_cast<double>(p.step), p.loss);
  std::string svg = csv_path_.substr(0, csv_path_.rfind('.')) + ".svg";
  write_loss_svg(svg, label_ + " loss", {{"train", train}, {"validation", val}});
}

void write_loss_svg(const std::string& path, const std::string& title,
                    const std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>& series) {
  const double W = 640, H = 400, L = 60, R = 20, T = 40, B = 50;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& [name, pts] : series)
    for (auto [x, y] : pts) x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
  if (x0 > x1) return;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
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
       << static_cast<long long>(x) << "</text>\n";
  }
  os << "<text x='" << W / 2 << "' y='" << H - 12 << "' text-anchor='middle' font-size='12'>step</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const auto& [name, pts] = series[s];
    if (pts.empty()) continue;
    os << "<polyline fill='none' stroke='" << colors[s % 4] << "' stroke-width='1.5' points='";
    for (auto [x, y] : pts) os << X(x) << "," << Y(y) << " ";
    os << "'/>\n<text x='" << W - R - 100 << "' y='" << T + 16 * (s + 1) << "' fill='" << colors[s % 4]
       << "' font-size='12'>" << name << "</text>\n";
  }
  os << "</svg>\n";
  std::ofstream(path) << os.str();
}

}  // namespace examples
