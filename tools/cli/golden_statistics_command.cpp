// gemma4-conform golden inspect: what a model golden's model does with its inputs (attention
// entropy per layer, the sink's and the beyond-window share, bf16 against fp32 over depth, the
// loss against log V) and whether it meets the trained-like criteria of golden/FORMAT.md.
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "golden/model_statistics.h"
#include "golden/candidate.h"
#include "reference/text.h"
#include "tools/cli/args.h"
#include "tools/cli/golden_subcommands.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {
namespace {

using text::pad;

std::string fixed(double v, int digits) {
  if (std::isnan(v)) return "-";
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

void print(const std::string& path, const golden::GoldenCase& g, const golden::ModelStatistics& s,
           const std::vector<golden::Criterion>& criteria) {
  std::cout << path << ": " << g.name << ", " << weights_mode_name(g.weights_mode) << " weights, " << g.dtype << ", "
            << s.layers.size() << " layers\n  " << pad("layer", 7) << pad("type", 9) << pad("entropy", 9)
            << pad("normalised", 12) << pad("first key", 11) << pad("beyond window", 15) << "bf16 cosine after\n";
  for (const golden::AttentionStatistics& a : s.layers) {
    std::cout << "  " << pad(std::to_string(a.layer), 7) << pad(a.type == LayerType::kSliding ? "sliding" : "global", 9)
              << pad(fixed(a.entropy, 3), 9) << pad(fixed(a.normalized_entropy, 3), 12) << pad(fixed(a.first_key_mass, 3), 11)
              << pad(fixed(a.beyond_window_mass, 3), 15) << fixed(s.bf16_cosine.at(a.layer + 1), 6) << "\n";
  }
  std::cout << "  loss " << fixed(s.loss, 4) << " against log V " << fixed(s.log_vocab, 4) << "\n";
  for (const golden::Criterion& c : criteria) {
    std::cout << "  " << (c.met() ? "ok    " : "NOT   ") << c.name << ": " << fixed(c.value, 4) << " (wanted "
              << fixed(c.low, 3) << " to " << fixed(c.high, 3) << ")\n";
  }
}

nlohmann::json to_json(const std::string& path, const golden::GoldenCase& g, const golden::ModelStatistics& s,
                       const std::vector<golden::Criterion>& criteria) {
  auto number = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
  nlohmann::json layers = nlohmann::json::array(), checks = nlohmann::json::array();
  for (const golden::AttentionStatistics& a : s.layers) {
    layers.push_back({{"layer", a.layer},
                      {"type", layer_type_name(a.type)},
                      {"entropy", a.entropy},
                      {"normalized_entropy", a.normalized_entropy},
                      {"first_key_mass", a.first_key_mass},
                      {"beyond_window_mass", number(a.beyond_window_mass)}});
  }
  for (const golden::Criterion& c : criteria) {
    checks.push_back({{"name", c.name}, {"value", c.value}, {"low", c.low}, {"high", c.high}, {"met", c.met()}});
  }
  return {{"path", path},         {"case", g.name},     {"dtype", g.dtype}, {"weights", weights_mode_name(g.weights_mode)},
          {"layers", layers},     {"bf16_cosine", s.bf16_cosine},           {"loss", number(s.loss)},
          {"log_vocab", s.log_vocab}, {"criteria", checks}};
}

}  // namespace

int golden_inspect_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"device", "cpu|cuda", "device to run the model on (default cpu)"},
      {"check", "", "exit 1 when a file misses a trained-like criterion (golden/FORMAT.md, \"Constructed weights\")"},
      {"json", "FILE.json", "write every file's statistics and criteria as JSON"}};
  Args args;
  if (!args.parse("golden inspect FILE...",
                  "Run each model golden's model (stored, generated or constructed weights) on its inputs and print\n"
                  "what it does: per layer the attention entropy (nats, and over log of the keys a row sees), the\n"
                  "share on the first key a row sees (the sink) and on keys a window or more back (global layers),\n"
                  "the cosine of a bf16 run to an fp32 run after the layer; the loss against log V; and the\n"
                  "trained-like criteria with their bounds.",
                  options, argv)) {
    return 0;
  }
  if (args.positional().empty()) throw UsageError{"name at least one model golden file"};
  const torch::Device device = parse_device(args.get("device", "cpu"));
  nlohmann::json all = nlohmann::json::array();
  int missed = 0;
  for (const std::string& path : args.positional()) {
    const golden::GoldenCase g = golden::read_untrusted_golden(path);
    const golden::ModelStatistics s = golden::model_statistics(g, device);
    const std::vector<golden::Criterion> criteria = golden::trained_like_criteria(s);
    print(path, g, s, criteria);
    for (const golden::Criterion& c : criteria) missed += c.met() ? 0 : 1;
    all.push_back(to_json(path, g, s, criteria));
  }
  if (args.has("json")) std::ofstream(args.get("json")) << all.dump(1) << "\n";
  std::cout << "golden inspect: " << args.positional().size() << " file(s), " << missed << " criteria not met\n";
  return args.has("check") && missed > 0 ? 1 : 0;
}

}  // namespace gemma4::cli
