#include "golden/data_dir.h"

#include "reference/error.h"
#include "reference/files.h"

namespace gemma4::golden {
namespace {

// The source tree this library was built from (GEMMA4_SOURCE_DIR), until an entry point says otherwise.
std::string& chosen() {
  static std::string dir = GEMMA4_SOURCE_DIR;
  return dir;
}

bool has_data(const std::string& dir) {
  return files::is_directory(files::join(dir, "golden")) && files::is_directory(files::join(dir, "reference/configs"));
}

}  // namespace

std::string data_dir() { return chosen(); }

void set_data_dir(const std::string& dir) {
  if (!has_data(dir)) throw Error(dir + ": not a gemma4-conformance data directory (no golden/ and reference/configs/)");
  chosen() = dir;
}

std::string installed_data_dir(const std::string& binary_path) {
  const size_t slash = binary_path.rfind('/');
  if (slash == std::string::npos) return "";
  const std::string dir = files::join(binary_path.substr(0, slash), "../share/gemma4_conformance");
  return has_data(dir) ? dir : "";
}

std::vector<std::string> golden_files(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const std::string& name : files::list_directory(dir)) {
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(files::join(dir, name));
    }
  }
  return out;  // list_directory sorts
}

std::vector<CommittedGolden> committed_goldens(const std::string& golden_dir, const std::string& dtype) {
  const std::string suffix = "." + dtype + ".h5";
  std::vector<CommittedGolden> out;
  auto stem = [&](const std::string& path) {
    const size_t slash = path.rfind('/') + 1;
    return path.substr(slash, path.size() - slash - suffix.size());
  };
  for (const std::string& path : golden_files(files::join(golden_dir, "reference/op"), suffix)) {
    out.push_back({GoldenGroup::kOp, "op/" + stem(path), path, ""});
  }
  for (const std::string& path : golden_files(files::join(golden_dir, "reference/model"), suffix)) {
    out.push_back({GoldenGroup::kModel, "model/" + stem(path), path, ""});
  }
  const std::string transformers = files::join(golden_dir, "transformers");
  for (const std::string& name : files::list_directory(transformers)) {
    const std::string dir = files::join(transformers, name);
    const std::string path = files::join(dir, "golden" + suffix);
    if (files::is_file(path)) out.push_back({GoldenGroup::kTransformers, "transformers/" + name, path, dir});
  }
  return out;
}

}  // namespace gemma4::golden
