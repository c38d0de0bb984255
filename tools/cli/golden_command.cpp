// gemma4-conform golden: list, generate, verify, diff and show golden files (golden/FORMAT.md).
#include <ATen/ATen.h>

#include <cstdio>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "git_sha.h"  // generated at build time

#include "conformance/compare.h"
#include "golden/baseline.h"
#include "golden/candidate.h"
#include "golden/catalogue.h"
#include "golden/decode_golden.h"
#include "golden/golden_file.h"
#include "golden/model_cases.h"
#include "golden/verify.h"
#include "reference/error.h"
#include "reference/files.h"
#include "tools/cli/args.h"
#include "tools/cli/commands.h"
#include "tools/cli/golden_report.h"
#include "tools/cli/golden_subcommands.h"
#include "reference/text.h"

namespace gemma4::cli {

using text::pad;
namespace {

using golden::GoldenCase;
using golden::TensorMap;

const char* kGoldenHelp =
    "usage: gemma4-conform golden <list|generate|verify|check|baseline|diff|show|inspect> [options]\n\n"
    "Golden tensors in HDF5 (golden/FORMAT.md).\n\n"
    "  list                  the case catalogue, one name per line (tiny CPU cases first)\n"
    "  generate              compute cases with the reference and write golden files\n"
    "  verify PATH...        recompute files with the reference and judge them under the tolerance policy\n"
    "  check GOLDEN CAND     judge outputs computed elsewhere (an HDF5 candidate file) against a golden\n"
    "  baseline PATH...      (re)compute the baseline family's errors of bf16/f16 files (baseline/, in place)\n"
    "  diff A B              compare two golden files dataset by dataset\n"
    "  show FILE             print a file's attributes and datasets\n"
    "  inspect FILE...       what a model golden's model does: attention entropy, sink and beyond-window\n"
    "                        share, bf16 against fp32 per layer, loss against log V, trained-like criteria\n\n"
    "gemma4-conform golden <subcommand> --help for its options.\n";

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
int generate_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"case", "NAME[,NAME...]", "case(s) from `golden list`"},
      {"all", "", "every tiny case (op/* and model/*)"},
      {"all-real", "", "every real-geometry case (real/*: S = 4096, meant for a GPU)"},
      {"out", "DIR", "output directory; files go to DIR/<case>.<dtype>.h5", true},
      {"dtype", "f32|bf16|f16|all", "precision (default f32; all: one file per dtype)"},
      {"device", "cpu|cuda", "device (default cpu)"},
      {"seed", "N", "seed of every generated tensor (default 0)"},
      {"configs", "DIR", "released configs for model/real cases (default reference/configs)"},
  };
  Args args;
  if (!args.parse("golden generate",
                  "Compute golden cases with the reference and write them in golden format v2 (bf16/f16 files with\n"
                  "the baseline family's errors: the reference's eager run and every in-tree variant).",
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
      o.family = conformance::baseline_family(o.device, d);
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
// A decode golden (FORMAT.md, "Decode goldens"): the reference decodes the case's checkpoint.
conformance::Run verify_decode_file(const std::string& path, const torch::Device& device, bool quiet) {
  const golden::DecodeGolden g = golden::read_decode_golden(path);
  const golden::VerifyReport report = golden::verify_decode_golden(g, device);
  const bool pass = report.pass();
  std::cout << (pass ? "PASS " : "FAIL ") << path << "  case " << g.name << ", decode, f32, " << g.generator << ": "
            << report.checks.size() - report.failures() << "/" << report.checks.size() << " tensors pass\n";
  if (!quiet || !pass) print_verify_table(report);
  return golden_run(path, "f32", report);
}

// The golden files a path names: the file itself, or every .h5 file below a folder, sorted (the
// committed goldens: golden/, golden/reference/, golden/transformers/<case>/ are all folders of them).
void add_golden_paths(const std::string& path, std::vector<std::string>& out) {
  if (!files::is_directory(path)) {
    out.push_back(path);
    return;
  }
  for (const std::string& name : files::list_directory(path)) {
    const std::string child = files::join(path, name);
    if (files::is_directory(child)) {
      add_golden_paths(child, out);
    } else if (name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0) {
      out.push_back(child);
    }
  }
}

int verify_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {
      {"device", "cpu|cuda", "device to recompute on (default cpu)"},
      {"quiet", "", "one line per file instead of a table"},
      {"report", "FILE.json", "write every tensor's row of every file as JSON (conformance/report.h)"},
      {"junit", "FILE.xml", "write a JUnit XML report: a test suite per file, a test case per tensor"},
  };
  Args args;
  if (!args.parse("golden verify PATH...",
                  "Recompute each golden file (a folder: every .h5 file below it) with the reference (the file's dtype, its inputs and weights) and judge\n"
                  "every dataset on its judged positions (judged/) under the tolerance policy (golden/FORMAT.md):\n"
                  "fp32 files against expected/ (max_abs <= 1e-4 max|expected|, cosine >= 0.99999); bf16/f16 files\n"
                  "against truth/, max_abs and RMS each within a factor of the baseline family's largest error plus\n"
                  "the dtype's unit roundoff times the truth's scale. Every value must be finite. Exit 1 if any\n"
                  "tensor fails or any file cannot be read (damaged, truncated, wrong version, NaN).\n"
                  "A decode golden (kind decode) is decoded from its case's checkpoint in f32: teacher-forced scores\n"
                  "and prompt caches (whole prompt, and in chunks of 5) under the fp32 rule, and generate's tokens,\n"
                  "cached and uncached, equal to the golden's.",
                  options, argv)) {
    return 0;
  }
  if (args.positional().empty()) throw UsageError{"name at least one golden file or folder"};
  const torch::Device device = parse_device(args.get("device", "cpu"));
  std::vector<std::string> paths;
  for (const std::string& path : args.positional()) add_golden_paths(path, paths);
  if (paths.empty()) throw Error("no .h5 file in " + args.positional()[0]);
  conformance::Report out{"golden verify", {}};
  for (const std::string& path : paths) {
    conformance::Run run;
    run.subject = path;
    run.device = device.is_cuda() ? "cuda" : "cpu";
    try {
      if (golden::is_decode_golden(path)) {
        run = verify_decode_file(path, device, args.has("quiet"));
      } else {
        const GoldenCase g = golden::read_untrusted_golden(path);
        const golden::VerifyReport report = golden::verify_golden(g, device);
        const bool pass = report.pass();
        std::cout << (pass ? "PASS " : "FAIL ") << path << "  case " << g.name << ", " << g.kind << ", " << g.dtype
                  << ", " << g.provenance.generator << " on " << g.provenance.device
                  << (g.provenance.gpu_name.empty() ? "" : " (" + g.provenance.gpu_name + ")") << ": "
                  << report.checks.size() - report.failures() << "/" << report.checks.size() << " tensors pass\n";
        if (!args.has("quiet") || !pass) print_verify_table(report);
        run = golden_run(path, g.dtype, report);
      }
    } catch (const Error& e) {
      run.error = e.what();
    } catch (const c10::Error& e) {
      run.error = e.what_without_backtrace();
    }
    if (!run.error.empty()) std::cout << "FAIL " << path << ": " << run.error << "\n";
    run.device = device.is_cuda() ? "cuda" : "cpu";
    out.runs.push_back(std::move(run));
  }
  int failed_files = 0;
  for (const conformance::Run& run : out.runs) failed_files += run.passed() ? 0 : 1;
  if (args.has("report")) conformance::write_json(args.get("report"), conformance::to_json(out));
  if (args.has("junit")) conformance::write_junit(args.get("junit"), out);
  const size_t n = paths.size();
  std::cout << "golden verify: " << n - failed_files << "/" << n << " files pass\n";
  return failed_files == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------------------------
int baseline_command(const std::vector<std::string>& argv) {
  const std::vector<Option> options = {{"device", "cpu|cuda", "device to recompute on (default cpu)"}};
  Args args;
  if (!args.parse("golden baseline PATH...",
                  "Recompute the baseline family (the in-tree legitimate variants, gemma4-conform backends) on each\n"
                  "bf16/f16 golden file and rewrite its baseline/ group in place: each member's max-abs and RMS error\n"
                  "against truth/ (golden/FORMAT.md). Use after writing a golden by other means (golden/generators/hf_cases.py).\n"
                  "f32 files are left alone.",
                  options, argv)) {
    return 0;
  }
  if (args.positional().empty()) throw UsageError{"name at least one golden file"};
  const torch::Device device = parse_device(args.get("device", "cpu"));
  for (const std::string& path : args.positional()) {
    GoldenCase g = golden::read_golden(path, /*need_baseline=*/false);
    if (g.dtype == "f32") {
      std::cout << "skip " << path << " (f32: judged against expected/)\n";
      continue;
    }
    golden::attach_baseline(g, conformance::baseline_family(device, golden::dtype_from_name(g.dtype)), device);
    golden::write_golden(path, g);
    std::cout << "wrote baseline/ of " << path << " (" << g.baseline_family.size() << " members, " << g.baseline.size()
              << " datasets)\n";
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
  if (argv[0] == "check") return golden_check_command(rest);
  if (argv[0] == "baseline") return baseline_command(rest);
  if (argv[0] == "diff") return golden_diff_command(rest);
  if (argv[0] == "show") return golden_show_command(rest);
  if (argv[0] == "inspect") return golden_inspect_command(rest);
  throw UsageError{"unknown golden subcommand '" + argv[0] + "' (list, generate, verify, check, baseline, diff, show, inspect)"};
}

}  // namespace gemma4::cli
