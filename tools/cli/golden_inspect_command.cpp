// gemma4-conform golden diff and show: read golden files and print what they hold, without
// recomputing anything (golden/FORMAT.md).
#include <ATen/ATen.h>

#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "golden/candidate.h"
#include "golden/golden_file.h"
#include "golden/tolerance.h"
#include "reference/error.h"
#include "tools/cli/args.h"
#include "tools/cli/golden_subcommands.h"
#include "reference/text.h"

namespace gemma4::cli {

using text::pad;
using text::sci;
namespace {

using golden::GoldenCase;
using golden::TensorMap;

std::string fmt(double v, int precision = 3) {
  std::ostringstream s;
  s << std::setprecision(precision) << (std::abs(v) >= 1e-3 || v == 0 ? std::fixed : std::scientific) << v;
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// Every dataset of a file by its full path ("expected/outputs/logits").
TensorMap all_datasets(const GoldenCase& g) {
  TensorMap out;
  const std::pair<const char*, const TensorMap*> groups[] = {
      {"inputs/", &g.inputs}, {"weights/", &g.weights}, {"upstream/", &g.upstream}, {"expected/", &g.expected}, {"truth/", &g.truth}};
  for (const auto& [prefix, map] : groups) {
    for (const auto& [name, t] : *map) out[prefix + name] = t;
  }
  return out;
}

std::map<std::string, std::string> attributes(const GoldenCase& g) {
  return {{"kind", g.kind},
          {"case", g.name},
          {"generator", g.provenance.generator},
          {"config", g.config.dump()},
          {"dtype", g.dtype},
          {"device", g.provenance.device},
          {"seed", std::to_string(g.seed)},
          {"torch_version", g.provenance.torch_version},
          {"cuda_version", g.provenance.cuda_version},
          {"gpu_name", g.provenance.gpu_name},
          {"weights", weights_mode_name(g.weights_mode)},
          {"kv_key", g.kv_key},
          {"layer", std::to_string(g.layer)}};
}

}  // namespace

int golden_diff_command(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("golden diff A B",
                  "Compare two golden files: attributes that differ, datasets only in one, and for each dataset that\n"
                  "is not bitwise equal its cosine, NMSE (B against A), max abs and max rel error. Exit 0 when the\n"
                  "files hold identical attributes and datasets, 1 otherwise.",
                  {}, argv)) {
    return 0;
  }
  if (args.positional().size() != 2) throw UsageError{"golden diff takes exactly two files"};
  const GoldenCase a = golden::read_untrusted_golden(args.positional()[0]);
  const GoldenCase b = golden::read_untrusted_golden(args.positional()[1]);
  int differences = 0;
  const auto attrs_a = attributes(a), attrs_b = attributes(b);
  for (const auto& [name, value] : attrs_a) {
    if (attrs_b.at(name) == value) continue;
    ++differences;
    std::cout << "attribute " << name << ": A " << value.substr(0, 80) << " | B " << attrs_b.at(name).substr(0, 80) << "\n";
  }
  const TensorMap da = all_datasets(a), db = all_datasets(b);
  for (const auto& [name, t] : db) {
    if (!da.count(name)) {
      ++differences;
      std::cout << "only in B: " << name << "\n";
    }
  }
  int equal = 0;
  bool header = false;
  for (const auto& [name, ta] : da) {
    auto it = db.find(name);
    if (it == db.end()) {
      ++differences;
      std::cout << "only in A: " << name << "\n";
      continue;
    }
    const torch::Tensor& tb = it->second;
    if (ta.sizes() != tb.sizes() || ta.scalar_type() != tb.scalar_type()) {
      ++differences;
      std::cout << name << ": A " << shape_string(ta.sizes()) << " " << ta.scalar_type() << ", B "
                << shape_string(tb.sizes()) << " " << tb.scalar_type() << "\n";
      continue;
    }
    if (at::equal(ta, tb)) {
      ++equal;
      continue;
    }
    ++differences;
    if (!header) {
      std::cout << pad("dataset", 60) << pad("cosine", 13) << pad("nmse", 10) << pad("max_abs", 10) << "max_rel\n";
      header = true;
    }
    const golden::Metrics m = golden::measure(tb, ta);
    std::ostringstream cosine;
    cosine << std::fixed << std::setprecision(9) << m.cosine;
    std::cout << pad(name, 60) << pad(cosine.str(), 13) << pad(sci(m.nmse), 10) << pad(sci(m.max_abs), 10) << sci(m.max_rel)
              << "\n";
  }
  std::cout << "golden diff: " << equal << " datasets identical, " << differences << " differences\n";
  return differences == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
int golden_show_command(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("golden show FILE", "Print a golden file's attributes and every dataset with its shape and range.", {},
                  argv)) {
    return 0;
  }
  if (args.positional().size() != 1) throw UsageError{"golden show takes exactly one file"};
  const GoldenCase g = golden::read_untrusted_golden(args.positional()[0]);
  std::cout << args.positional()[0] << "\n";
  for (const auto& [name, value] : attributes(g)) {
    if (value.empty() || (name == "layer" && g.layer < 0)) continue;
    std::cout << "  " << pad(name, 15) << (name == "config" && value.size() > 200 ? value.substr(0, 200) + "..." : value)
              << "\n";
  }
  std::cout << "  " << pad("tolerance", 15) << g.tolerance_class() << "\n  " << pad("description", 15) << g.description
            << "\n\n"
            << "  " << pad("dataset", 64) << pad("shape", 20) << pad("type", 8) << pad("min", 12) << pad("max", 12)
            << "mean|x|\n";
  for (const auto& [name, t] : all_datasets(g)) {
    std::cout << "  " << pad(name, 64) << pad(shape_string(t.sizes()), 20) << pad(t.is_floating_point() ? "f32" : "i64", 8);
    if (t.numel() > 0) {
      const torch::Tensor d = t.to(torch::kFloat64);
      std::cout << pad(fmt(d.min().item<double>()), 12) << pad(fmt(d.max().item<double>()), 12)
                << fmt(d.abs().mean().item<double>());
    }
    std::cout << "\n";
  }
  return 0;
}

}  // namespace gemma4::cli
