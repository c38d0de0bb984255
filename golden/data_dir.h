#pragma once
// Where the project's committed data is read: golden/ (the goldens) and reference/configs/ (the
// released models' configs), laid out as in the source tree. A build tree reads its own source
// tree; an installed gemma4-conform reads <prefix>/share/gemma4_conformance; the Python package
// reads the data/ folder inside it. The entry point (the CLI's main, the Python module's import)
// chooses once, before anything runs; nothing is read from the environment.
#include <string>
#include <vector>

namespace gemma4::golden {

std::string data_dir();
// Throws gemma4::Error when `dir` has no golden/ or no reference/configs/.
void set_data_dir(const std::string& dir);

// The installed data beside an executable or library at `binary_path`
// (<prefix>/bin/x -> <prefix>/share/gemma4_conformance), or "" when there is none.
std::string installed_data_dir(const std::string& binary_path);

// The committed goldens of one dtype ("f32", "bf16", "f16"), found here only: the suite's golden
// checks, conform-model's model goldens and the scoreboard's candidate cases all list them so.
enum class GoldenGroup {
  kOp,            // golden/reference/op/<case>.<dtype>.h5
  kModel,         // golden/reference/model/<case>.<dtype>.h5
  kTransformers,  // golden/transformers/<case>/golden.<dtype>.h5, beside its config.json and weights
};
struct CommittedGolden {
  GoldenGroup group;
  std::string name;      // "op/rms_norm-scale", "model/e2b", "transformers/e2b_like"
  std::string path;      // the .h5 file
  std::string case_dir;  // kTransformers: the case's directory; "" otherwise
};
// In group order, each group sorted by name. `golden_dir`: the goldens' root (golden/ of data_dir()).
std::vector<CommittedGolden> committed_goldens(const std::string& golden_dir, const std::string& dtype);
// The files in `dir` whose names end in `suffix` (".f32.h5"), sorted.
std::vector<std::string> golden_files(const std::string& dir, const std::string& suffix);

}  // namespace gemma4::golden
