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

}  // namespace gemma4::golden
