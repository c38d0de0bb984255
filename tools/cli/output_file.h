#pragma once
// The HDF5 file a command writes: created before the work, so that an unwritable path fails
// first, and removed again unless the command marks it kept (a failed run leaves no file).
#include <cstdio>
#include <string>

#include "golden/h5_tensors.h"

namespace gemma4::cli {

struct OutputFile {
  explicit OutputFile(std::string p) : path(std::move(p)), h5(h5::File::create(path)) {}
  ~OutputFile() {
    if (!keep) std::remove(path.c_str());
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::string path;
  h5::File h5;
  bool keep = false;
};

}  // namespace gemma4::cli
