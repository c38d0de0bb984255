#include "golden/baseline.h"

#include <ATen/ATen.h>

#include "golden/catalogue.h"
#include "reference/error.h"

namespace gemma4::golden {
namespace {

torch::Tensor judged_of(const GoldenCase& g, const std::string& name) {
  auto it = g.judged.find(name);
  return it == g.judged.end() ? torch::Tensor() : it->second;
}

// [max_abs, rms] of `computed` against truth/, per dataset.
TensorMap errors_of(const GoldenCase& g, const TensorMap& computed, const std::string& who) {
  TensorMap out;
  for (const auto& [name, truth] : g.truth) {
    auto it = computed.find(name);
    if (it == computed.end()) throw Error("baseline member '" + who + "' did not compute '" + name + "'");
    const Metrics m = measure(it->second, truth, judged_of(g, name));
    out[name] = torch::tensor({m.max_abs, m.rms}, torch::kFloat64);
  }
  return out;
}

}  // namespace

void attach_baseline(GoldenCase& g, const std::vector<FamilyMember>& family, const torch::Device& device) {
  g.baseline.clear();
  g.baseline_family.clear();
  if (g.dtype == "f32") return;  // fp32 is judged against expected/ directly
  std::vector<TensorMap> rows{errors_of(g, g.expected, "expected")};
  g.baseline_family.push_back("expected");
  for (const FamilyMember& member : family) {
    rows.push_back(errors_of(g, recompute(g, device, member.forward), member.name));
    g.baseline_family.push_back(member.name);
  }
  for (const auto& [name, truth] : g.truth) {
    std::vector<torch::Tensor> table;
    for (const TensorMap& row : rows) table.push_back(row.at(name));
    g.baseline[name] = at::stack(table).to(torch::kFloat32);
  }
}

BaselineError baseline_error(const GoldenCase& g, const std::string& dataset, const std::string& exclude) {
  auto it = g.baseline.find(dataset);
  if (it == g.baseline.end()) throw Error("no baseline for '" + dataset + "' (a bf16/f16 golden needs baseline/)");
  const torch::Tensor table = it->second.to(torch::kFloat64);
  BaselineError b;
  for (size_t m = 0; m < g.baseline_family.size(); ++m) {
    if (g.baseline_family[m] == exclude) continue;
    const double max_abs = table[m][0].item<double>(), rms = table[m][1].item<double>();
    if (max_abs >= b.max_abs) b.max_abs = max_abs, b.max_abs_by = g.baseline_family[m];
    if (rms >= b.rms) b.rms = rms, b.rms_by = g.baseline_family[m];
  }
  return b;
}

}  // namespace gemma4::golden
