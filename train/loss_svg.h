// The loss curve as an SVG picture (no plotting library): the Trainer writes <output_dir>/loss.svg
// from its log history, so a run's progress can be looked at in a browser, also after a resume.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tg::train {

// A line of (step, loss) points; with markers, a dot on every point (so a single evaluation shows).
struct LossSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool markers = false;
};

// Labelled axes (optimizer step, loss in nats per token) and a legend; written atomically.
// Non-finite losses are left out; nothing is written when no point is finite.
void write_loss_svg(const std::string& path, const std::string& title, const std::vector<LossSeries>& series);

}  // namespace tg::train
