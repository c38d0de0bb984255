// real_size: the released geometries at the sizes kernels and engines dispatch on (issue "Real-size
// conformance"; golden/FORMAT.md, "Real-size goldens"): head dims 256 and 512, windows 512 and 1024,
// the released GQA ratios, K=V global layers, KV sharing, per-layer embeddings and the MoE's 128
// experts, over S = 2 x window + 1 tokens in a left-padded and a packed row, computed by
// transformers (golden/generators/hf_real_cases.py).
//  - golden/<geometry>: golden/real/<geometry>.<dtype>.h5 recomputed through the backend, forward
//    and backward, and judged as the golden category judges every file.
//  - decode/<geometry>: golden/real/<geometry>.decode.f32.h5, transformers' greedy decoding after a
//    prompt of window + 40 tokens (every sliding cache wrapped, KV-shared layers reading it), teacher-
//    forced through the backend's cache as the decode category does with the tiny decode goldens.
//  - speculative/<geometry>: the same tokens fed as speculative drafts with rejected guesses rolled
//    back (checks_decode.cpp's drafts), against the same scores.
// The files of a dtype that is not committed (f16: the GPU host makes it) are simply absent: no
// check, which the summary's count shows.
#include "conformance/check.h"
#include "golden/data_dir.h"
#include "golden/golden_file.h"
#include "reference/files.h"

namespace gemma4::conformance {
namespace {

// An f32 MoE golden judged on another kind of device than the one that made it: 4098 tokens routed
// over 128 experts in 6 layers meet top-k near-ties below fp32 rounding, and a correct run on
// another device routes some token otherwise (measured: every legitimate backend on an H200 against
// the CPU-made 26B-A4B file, gradients off by 3e-4 of their scale). The fp32 rule has no family to
// carry that, so such a file is judged on its own kind of device only; bf16 and f16, where the
// family carries routing flips, are judged everywhere.
void check_real_golden(const std::string& path, const SuiteOptions& o, Reporter& r) {
  const golden::GoldenCase g = golden::read_golden(path);
  const bool moe = parse_config(g.config).enable_moe_block;
  const std::string made_on = g.provenance.device, here = o.device.is_cuda() ? "cuda" : "cpu";
  if (moe && g.dtype == "f32" && made_on != here) {
    return r.not_supported("f32 MoE routing at real size is decided by near-ties below fp32 rounding on another "
                           "device; this file was made on " + made_on + " (its bf16/f16 files are judged here)");
  }
  check_golden_case(g, o, r);
}

}  // namespace

std::vector<Check> real_size_checks(const SuiteOptions& o) {
  const std::string suffix = "." + golden::dtype_name(o.dtype) + ".h5";
  std::vector<Check> checks;
  for (const std::string& path : golden::golden_files(files::join(o.golden_dir, "real"), suffix)) {
    const std::string file = path.substr(path.rfind('/') + 1);
    if (file.find(".decode.") != std::string::npos) continue;  // <geometry>.decode.f32.h5: below
    checks.push_back({Category::kRealSize, "golden/" + file.substr(0, file.size() - suffix.size()),
                      [path](const SuiteOptions& o, Reporter& r) { check_real_golden(path, o, r); }});
  }
  for (const std::string& path : golden::golden_files(files::join(o.golden_dir, "real"), ".decode.f32.h5")) {
    const std::string file = path.substr(path.rfind('/') + 1);
    const std::string geometry = file.substr(0, file.size() - std::string(".decode.f32.h5").size());
    for (bool speculative : {false, true}) {
      checks.push_back({Category::kRealSize, (speculative ? "speculative/" : "decode/") + geometry,
                        [path, speculative](const SuiteOptions& o, Reporter& r) {
                          check_decode_golden(path, speculative, o, r);
                        }});
    }
  }
  return checks;
}

}  // namespace gemma4::conformance
