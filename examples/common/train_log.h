// What a user expects to see from a training run: a live progress line (step, loss, lr,
// tokens/s, elapsed and ETA), a CSV of every logged loss, and a loss-curve picture (SVG) next
// to it.
#pragma once

#include <cstdint>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace examples {

class TrainLog {
 public:
  // Writes <csv_path> (and the SVG beside it, same name with .svg) as it goes; an empty path
  // keeps only the console line. `append` continues an existing CSV (resume).
  TrainLog(std::string label, int64_t total_steps, int64_t tokens_per_step, std::string csv_path = "",
           bool append = false);

  // One optimizer step done (step counts from 1). Prints the progress line.
  void step(int64_t step, double loss, double lr);
  // A validation measurement, logged to the CSV and printed on its own line.
  void eval(int64_t step, const std::string& split, double loss);
  // Ends the live line and writes the SVG.
  void finish();

  double last_loss() const { return last_loss_; }

 private:
  void write_svg() const;
  std::string label_;
  int64_t total_, tokens_per_step_, first_step_ = -1;
  std::string csv_path_;
  std::ofstream csv_;
  std::chrono::steady_clock::time_point start_;
  double last_loss_ = 0, ema_ = -1;
  bool tty_;
  struct Point {
    int64_t step;
    double loss;
    bool train;
  };
  std::vector<Point> points_;
};

// Writes a simple line chart of (step, loss) series to an SVG file.
void write_loss_svg(const std::string& path, const std::string& title,
                    const std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>& series);

}  // namespace examples
