// What a user expects to see from a training run: a live progress line (step, the smoothed and
// the raw loss, lr, tokens/s, elapsed and ETA), a CSV of every logged loss, and a loss-curve
// picture (SVG) next to it that covers the whole run, also after a resume.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace examples {

class TrainLog {
 public:
  // Writes <csv_path> (and the SVG beside it, same name with .svg) as it goes; an empty path
  // keeps only the console line. resume_step > 0 continues the CSV of an earlier run from that
  // step: its rows up to there stay (and are plotted), later ones (steps being redone) go.
  TrainLog(std::string label, int64_t total_steps, std::string csv_path = "", int64_t resume_step = 0);

  // Starts the clock of tokens/s and the ETA: call it right before the first step.
  void start();
  // One optimizer step done (step counts from 1) over `tokens` tokens. Prints the progress line.
  void step(int64_t step, double loss, double lr, int64_t tokens);
  // A validation measurement, logged to the CSV and printed on its own line.
  void eval(int64_t step, const std::string& split, double loss);
  // A line of text of its own (a generated sample), without breaking the live line.
  void note(const std::string& line);
  // Ends the live line and writes the SVG.
  void finish();

  double last_loss() const { return last_loss_; }
  double smoothed_loss() const { return ema_; }

 private:
  void write_svg() const;
  std::string label_;
  int64_t total_;
  std::string csv_path_;
  std::ofstream csv_;
  std::chrono::steady_clock::time_point start_;
  bool started_ = false;
  int64_t tokens_ = 0, steps_done_ = 0;
  double last_loss_ = 0, ema_ = -1;
  bool tty_;
  struct Point {
    int64_t step;
    double loss;
    bool train;
  };
  std::vector<Point> points_;
};

// A line chart of (step, loss) series in an SVG file: labelled axes, a legend, and a marker on
// every point of a series with markers (so a single validation point shows).
struct LossSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool markers = false;
};
void write_loss_svg(const std::string& path, const std::string& title, const std::vector<LossSeries>& series);

}  // namespace examples
