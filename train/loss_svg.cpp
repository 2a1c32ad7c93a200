#include "train/loss_svg.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "io/file.h"

namespace tg::train {

void write_loss_svg(const std::string& path, const std::string& title, const std::vector<LossSeries>& series) {
  const double W = 640, H = 400, L = 70, R = 20, T = 40, B = 50;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const LossSeries& s : series)
    for (const auto& [x, y] : s.points)
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
    const double y = y0 + (y1 - y0) * i / 4, x = x0 + (x1 - x0) * i / 4;
    os << "<text x='" << L - 6 << "' y='" << Y(y) + 4 << "' text-anchor='end' font-size='11'>" << std::round(y * 100) / 100
       << "</text>\n<text x='" << X(x) << "' y='" << H - B + 16 << "' text-anchor='middle' font-size='11'>"
       << static_cast<long long>(std::round(x)) << "</text>\n";
  }
  os << "<text x='" << (L + W - R) / 2 << "' y='" << H - 12 << "' text-anchor='middle' font-size='12'>optimizer step</text>\n"
     << "<text x='16' y='" << (T + H - B) / 2 << "' text-anchor='middle' font-size='12' transform='rotate(-90 16 "
     << (T + H - B) / 2 << ")'>loss (cross-entropy, nats per token)</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const LossSeries& line = series[s];
    if (line.points.empty()) continue;
    const char* color = colors[s % 4];
    os << "<polyline fill='none' stroke='" << color << "' stroke-width='1.5' points='";
    for (const auto& [x, y] : line.points)
      if (std::isfinite(y)) os << X(x) << "," << Y(y) << " ";
    os << "'/>\n";
    if (line.markers)
      for (const auto& [x, y] : line.points)
        if (std::isfinite(y)) os << "<circle cx='" << X(x) << "' cy='" << Y(y) << "' r='3.5' fill='" << color << "'/>\n";
    os << "<text x='" << W - R - 150 << "' y='" << T + 16 * (s + 1) << "' fill='" << color << "' font-size='12'>"
       << line.name << "</text>\n";
  }
  os << "</svg>\n";
  io::write_file_atomic(path, os.str());
}

}  // namespace tg::train
