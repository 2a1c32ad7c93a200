// Generator: a seed and a position in the Philox stream. Every draw reserves a block of
// counters and advances the position, so the same seed gives the same numbers on every machine
// and the state (seed, offset) is two integers that checkpoints can save.
#pragma once

#include <cstdint>

namespace tg {

class Generator;

namespace detail {
// Told of each draw while activation checkpointing runs a function (core/activation_checkpoint.cpp),
// so that the recomputation at backward can draw the same numbers again.
struct DrawObserver {
  virtual void before_draw(Generator& gen) = 0;

 protected:
  ~DrawObserver() = default;
};
extern thread_local DrawObserver* draw_observer;
}  // namespace detail

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n Philox counters (4 random words each) and returns the first.
  uint64_t reserve(uint64_t n) {
    if (detail::draw_observer) detail::draw_observer->before_draw(*this);
    uint64_t first = offset_;
    offset_ += n;
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator the factories use when none is passed.
Generator& default_generator();
inline void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace tg
