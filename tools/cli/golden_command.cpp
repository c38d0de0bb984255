// gemma4-conform golden: list, generate, verify, diff and show golden files (golden/FORMAT.md).
#include <ATen/ATen.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "git_sha.h"  // generated at build time

#include "golden/catalogue.h"
#include "golden/golden_file.h"
#include "golden/model_cases.h"
#include "golden/verify.h"
#include "reference/error.h"
#include "reference/files.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"

namespace gemma4::cli {
namespace {

using golden::GoldenCase;
using golden::TensorMap;

const char* kGoldenHelp =
    "usage: gemma4-conform golden <list|generate|verify|diff|show> [options]\n\n"
    "Golden tensors in HDF5 (golden/FORMAT.md).\n\n"
    "  list                  the case catalogue, one name per line (tiny CPU cases first)\n"
    "  generate              compute cases with the reference and write golden files\n"
    "  verify PATH...        recompute files with the reference and judge them under the tolerance policy\n"
    "  diff A B              compare two golden files dataset by dataset\n"
    "  show FILE             print a file's attributes and datasets\n\n"
    "gemma4-conform golden <subcommand> --help for its options.\n";

std::string fmt(double v, int precision = 3) {
  std::ostringstream s;
  s << std::setprecision(precision) << (std::abs(v) >= 1e-3 || v == 0 ? std::fixed : std::scientific) << v;
  return s.str();
}

std::string sci(double v) {
  std::ostringstream s;
  s << std::scientific << std::setprecision(2) << v;
  return s.str();
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s;
}

// ---------------------------------------------------------------------------------------------
int list_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"verbose", "", "also print the kind, whether it is tiny, and a summary"},
  };
  Args args;
  if (!args.parse("golden list", "Print the golden case catalogue: tiny CPU cases first, then the real-geometry ones.",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  for (const golden::CatalogueEntry& e : golden::catalogue()) {
    if (args.has("verbose")) {
      std::cout << pad(e.name, 34) << pad(e.kind, 7) << pad(e.tiny ? "tiny" : "gpu", 6) << e.summary << "\n";
    } else {
      std::cout << e.name << "\n";
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int generate_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"case", "NAME[,NAME...]", "case(s) from `golden list`"},
      {"all", "", "every tiny case (op/* and model/*)"},
      {"all-real", "", "every real-geometry case (real/*: S = 4096, meant for a GPU)"},
      {"out", "DIR", "output directory; files go to DIR/<case>.<dtype>.h5", true},
      {"dtype", "f32|bf16|f16|all", "precision (default f32; all: one file per dtype)"},
      {"device", "cpu|cuda", "device (default cpu)"},
      {"seed", "N", "seed of every generated tensor (default 0)"},
      {"configs", "DIR", "released configs for model/real cases (default $GEMMA4_SHARED_DIR/configs or ../shared/configs)"},
  };
  Args args;
  if (!args.parse("golden generate", "Compute golden cases with the reference and write them in golden format v1.",
                  options, argv)) {
    return 0;
  }
  if (!args.positional().empty()) throw UsageError{"unexpected argument '" + args.positional()[0] + "'"};
  std::vector<std::string> names = split_commas(args.get("case"));
  for (const golden::CatalogueEntry& e : golden::catalogue()) {
    if ((args.has("all") && e.tiny) || (args.has("all-real") && !e.tiny)) names.push_back(e.name);
  }
  if (names.empty()) throw UsageError{"name cases with --case, or use --all / --all-real"};
  std::vector<torch::ScalarType> dtypes;
  const std::string dtype = args.get("dtype", "f32");
  if (dtype == "all") {
    dtypes = {torch::kFloat32, torch::kBFloat16, torch::kFloat16};
  } else {
    dtypes = {parse_dtype(dtype)};
  }
  golden::GenerateOptions o;
  o.device = parse_device(args.get("device", "cpu"));
  try {
    o.seed = std::stoull(args.get("seed", "0"));
  } catch (const std::exception&) {
    throw UsageError{"--seed must be a non-negative integer, got '" + args.get("seed") + "'"};
  }
  o.generator = std::string("reference ") + GEMMA4_GIT_SHA;
  o.configs_dir = args.get("configs", golden::released_configs_dir());

  const std::string out_dir = args.get("out");
  for (const std::string& name : names) {
    for (torch::ScalarType d : dtypes) {
      o.dtype = d;
      const GoldenCase g = golden::generate_case(name, o);
      const std::string path = files::join(out_dir, golden::golden_file_name(name, d));
      files::make_directories(path.substr(0, path.rfind('/')));
      golden::write_golden(path, g);
      std::cout << "wrote " << path << " (" << g.expected.size() << " expected datasets, "
                << files::file_size(path) / 1024 << " KiB)\n";
    }
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
void print_verify_table(const golden::VerifyReport& report) {
  std::cout << "  " << pad("tensor", 56) << pad("cosine", 13) << pad("nmse", 10) << pad("max_abs", 10) << pad("max_rel", 10)
            << pad("bound", 10) << "verdict\n";
  for (const golden::TensorCheck& c : report.checks) {
    std::cout << "  " << pad(c.name, 56);
    if (!c.problem.empty()) {
      std::cout << "FAIL (" << c.problem << ")\n";
      continue;
    }
    const golden::Metrics& m = c.verdict.metrics;
    std::ostringstream cosine;
    cosine << std::fixed << std::setprecision(9) << m.cosine;
    std::cout << pad(cosine.str(), 13) << pad(sci(m.nmse), 10) << pad(sci(m.max_abs), 10) << pad(sci(m.max_rel), 10)
              << pad(sci(c.verdict.bound), 10) << (c.verdict.pass ? "pass" : "FAIL");
    if (!c.verdict.pass && c.verdict.rule == "fp32" && m.cosine < c.verdict.cosine_min) {
      std::cout << " (cosine below " << c.verdict.cosine_min << ")";
    }
    if (c.verdict.rule == "flash-attention") std::cout << "  (baseline " << sci(c.verdict.baseline_error) << ")";
    std::cout << "\n";
  }
}

int verify_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"device", "cpu|cuda", "device to recompute on (default cpu)"},
      {"quiet", "", "one line per file instead of a table"},
  };
  Args args;
  if (!args.parse("golden verify PATH...",
                  "Recompute each golden file with the reference (the file's dtype, its inputs and weights) and judge\n"
                  "every dataset under the tolerance policy: fp32 files against expected/ (max_abs <= 1e-4 max|expected|,\n"
                  "cosine >= 0.99999); bf16/f16 files by the FlashAttention rule against truth/ (bound = k * error of the\n"
                  "file's same-dtype baseline + unit roundoff * max|truth|; k = 2 outputs, 3 grads). Exit 1 if any\n"
                  "tensor fails or any file cannot be read (damaged, truncated, wrong version, NaN).",
                  options, argv)) {
    return 0;
  }
  if (args.positional().empty()) throw UsageError{"name at least one golden file"};
  const torch::Device device = parse_device(args.get("device", "cpu"));
  int failed_files = 0;
  for (const std::string& path : args.positional()) {
    try {
      const GoldenCase g = golden::read_golden(path);
      const golden::VerifyReport report = golden::verify_golden(g, device);
      const bool pass = report.pass();
      failed_files += pass ? 0 : 1;
      std::cout << (pass ? "PASS " : "FAIL ") << path << "  case " << g.name << ", " << g.kind << ", " << g.dtype
                << ", " << g.provenance.generator << " on " << g.provenance.device
                << (g.provenance.gpu_name.empty() ? "" : " (" + g.provenance.gpu_name + ")") << ": "
                << report.checks.size() - report.failures() << "/" << report.checks.size() << " tensors pass\n";
      if (!args.has("quiet") || !pass) print_verify_table(report);
    } catch (const Error& e) {
      ++failed_files;
      std::cout << "FAIL " << path << ": " << e.what() << "\n";
    } catch (const c10::Error& e) {
      ++failed_files;
      std::cout << "FAIL " << path << ": " << e.what_without_backtrace() << "\n";
    }
  }
  const size_t n = args.positional().size();
  std::cout << "golden verify: " << n - failed_files << "/" << n << " files pass\n";
  return failed_files == 0 ? 0 : 1;
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
          {"weights", g.weights_mode},
          {"kv_key", g.kv_key},
          {"layer", std::to_string(g.layer)}};
}

int diff_command(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("golden diff A B",
                  "Compare two golden files: attributes that differ, datasets only in one, and for each dataset that\n"
                  "is not bitwise equal its cosine, NMSE (B against A), max abs and max rel error. Exit 0 when the\n"
                  "files hold identical attributes and datasets, 1 otherwise.",
                  {}, argv)) {
    return 0;
  }
  if (args.positional().size() != 2) throw UsageError{"golden diff takes exactly two files"};
  const GoldenCase a = golden::read_golden(args.positional()[0]);
  const GoldenCase b = golden::read_golden(args.positional()[1]);
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
int show_command(const std::vector<std::string>& argv) {
  Args args;
  if (!args.parse("golden show FILE", "Print a golden file's attributes and every dataset with its shape and range.", {},
                  argv)) {
    return 0;
  }
  if (args.positional().size() != 1) throw UsageError{"golden show takes exactly one file"};
  const GoldenCase g = golden::read_golden(args.positional()[0]);
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

}  // namespace

int golden_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    (argv.empty() ? std::cerr : std::cout) << kGoldenHelp;
    return argv.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  if (argv[0] == "list") return list_command(rest);
  if (argv[0] == "generate") return generate_command(rest);
  if (argv[0] == "verify") return verify_command(rest);
  if (argv[0] == "diff") return diff_command(rest);
  if (argv[0] == "show") return show_command(rest);
  throw UsageError{"unknown golden subcommand '" + argv[0] + "' (list, generate, verify, diff, show)"};
}

}  // namespace gemma4::cli
