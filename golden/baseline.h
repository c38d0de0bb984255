#pragma once
// The baseline family of a reduced-precision golden (golden/FORMAT.md, "Tolerance policy"): the
// same-dtype errors against truth/ of several legitimate implementations, stored per dataset, so
// that a candidate is judged against the spread of correct rounding rather than one eager run.
#include <string>
#include <vector>

#include "golden/golden_file.h"
#include "golden/tolerance.h"
#include "reference/model.h"

namespace gemma4::golden {

// One legitimate implementation: a name and the ops (and KV hand-off) to recompute a case with,
// and the KV cache ops it decodes with (null: the reference's).
struct FamilyMember {
  std::string name;
  ForwardOptions forward;
  const KvCacheOps* kv_cache = nullptr;
};

// Fills g.baseline and g.baseline_family (bf16/f16 files only): "expected" (the file's own
// expected/) first, then each member recomputed on `device`, every one measured against truth/ on
// the judged positions. A member that cannot recompute the case (an op it does not support) throws.
void attach_baseline(GoldenCase& g, const std::vector<FamilyMember>& family, const torch::Device& device);

// The largest max-abs and RMS error on `dataset` among the family, leaving out the member named
// `exclude` (a candidate is never its own baseline).
BaselineError baseline_error(const GoldenCase& g, const std::string& dataset, const std::string& exclude = "");

}  // namespace gemma4::golden
