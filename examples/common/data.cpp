#include "examples/common/data.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "core/factory.h"
#include "core/detail/philox.h"

namespace examples {
namespace {

// A tiny deterministic picker over Philox words.
class Picker {
 public:
  explicit Picker(uint64_t seed) : seed_(seed) {}
  uint32_t next() {
    if (lane_ == 4) {
      block_ = tg::philox(seed_, counter_++);
      lane_ = 0;
    }
    return block_.v[lane_++];
  }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[next() % v.size()]; }
  int between(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint32_t>(hi - lo + 1)); }

 private:
  uint64_t seed_, counter_ = 0;
  tg::Philox4 block_{};
  int lane_ = 4;
};

std::string story_paragraph(Picker& p) {
  static const std::vector<std::string> names = {"anna", "the old man", "a small girl", "tom", "the baker",
                                                 "my sister", "the farmer", "a young boy"};
  static const std::vector<std::string> animals = {"the cat", "a dog", "the horse", "two birds", "the fox",
                                                   "a little mouse"};
  static const std::vector<std::string> verbs = {"walked to", "looked at", "ran past", "sat near",
                                                 "waited by", "came home to"};
  static const std::vector<std::string> places = {"the river", "the garden", "the market", "the green hill",
                                                  "the quiet house", "the edge of the wood"};
  static const std::vector<std::string> moods = {"it was a warm day", "the sky was grey", "the wind was soft",
                                                 "everyone was happy", "night came slowly"};
  std::string s;
  for (int i = 0, n = p.between(2, 4); i < n; ++i) {
    // One draw a statement: the order of the operands of + (and of a call's arguments) is
    // unspecified, so draws inside one expression gave another corpus with clang. The order
    // below is the one gcc took (last word first), so the corpora stay those of earlier runs.
    switch (p.between(0, 2)) {
      case 0: {
        const std::string& where = p.pick(places);
        const std::string& did = p.pick(verbs);
        s += p.pick(names) + " " + did + " " + where + ". ";
        break;
      }
      case 1: {
        const std::string& whom = p.pick(names);
        const std::string& did = p.pick(verbs);
        s += p.pick(animals) + " " + did + " " + whom + ". ";
        break;
      }
      default: {
        const std::string& who = p.pick(names);
        s += p.pick(moods) + ", and " + who + " smiled. ";
        break;
      }
    }
  }
  return s + "\n";
}

std::string log_line(Picker& p) {
  static const std::vector<std::string> winds = {"NORTH", "NORTH-EAST", "EAST", "SOUTH", "SOUTH-WEST", "WEST"};
  static const std::vector<std::string> sky = {"CLEAR", "OVERCAST", "RAIN", "FOG", "SQUALLS"};
  static const std::vector<std::string> events = {"reefed the mainsail", "sighted land to port",
                                                  "pumped the bilge", "mended the jib", "took a sounding",
                                                  "changed the watch", "logged a whale"};
  // One draw a statement, in the order gcc took (see story_paragraph).
  const int minute = p.between(0, 59);
  const int hour = p.between(0, 23);
  const int day = p.between(1, 365);
  const std::string& event = p.pick(events);
  const std::string& weather = p.pick(sky);
  const int knots = p.between(3, 40);
  char stamp[64];
  std::snprintf(stamp, sizeof stamp, "LOG %03d %02d:%02d | ", day, hour, minute);
  return std::string(stamp) + "WIND " + p.pick(winds) + " " + std::to_string(knots) + " KN | " + weather + " | " +
         event + ".\n";
}

}  // namespace

int64_t default_batch_size(const std::string& config_name) { return config_name == "small" ? 16 : 8; }

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TG_CHECK(in.good(), "read_text_file", "cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  TG_CHECK(text.size() >= 2, "read_text_file", "'", path, "' holds ", text.size(), " bytes; wants text to learn");
  return text;
}

std::string generate_corpus(const std::string& style, uint64_t seed, size_t bytes) {
  TG_CHECK(style == "stories" || style == "logbook", "generate_corpus", "style must be \"stories\" or "
           "\"logbook\", got \"", style, "\"");
  Picker p(seed);
  std::string text;
  while (text.size() < bytes) text += style == "stories" ? story_paragraph(p) : log_line(p);
  return text;
}

ByteDataset::ByteDataset(std::string text, double val_fraction) : text_(std::move(text)) {
  TG_CHECK(val_fraction > 0 && val_fraction < 1, "ByteDataset", "val_fraction must be in (0, 1), got ", val_fraction);
  split_ = static_cast<size_t>(static_cast<double>(text_.size()) * (1 - val_fraction));
}

tg::Tensor ByteDataset::batch(bool train, int64_t batch, int64_t seq, tg::Generator& gen, tg::Device device) const {
  const size_t begin = train ? 0 : split_, end = train ? split_ : text_.size();
  TG_CHECK(end - begin > static_cast<size_t>(seq), "ByteDataset", "the ", train ? "training" : "validation",
           " split has ", end - begin, " bytes, too few for windows of ", seq);
  std::vector<int64_t> starts = tg::randint(0, static_cast<int64_t>(end - begin) - seq, {batch}, gen).to_vector<int64_t>();
  std::vector<int64_t> ids(static_cast<size_t>(batch * seq));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) ids[b * seq + t] = static_cast<unsigned char>(text_[begin + starts[b] + t]);
  return tg::from_vector(ids, {batch, seq}, device);
}

}  // namespace examples
