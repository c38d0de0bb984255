#include "reference/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "reference/error.h"

namespace gemma4 {
namespace {

using nlohmann::json;

// The format stores every number little-endian; tensors are copied byte for byte, which is only
// right on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

struct DtypeInfo {
  const char* name;
  torch::Dtype dtype;
  uint64_t itemsize;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64, 8}, {"F32", torch::kFloat32, 4}, {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2}, {"I64", torch::kInt64, 8},  {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},     {"I8", torch::kInt8, 1},    {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
};

const DtypeInfo* find_dtype(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DtypeInfo* find_dtype(torch::Dtype dtype) {
  for (const auto& d : kDtypes) {
    if (dtype == d.dtype) return &d;
  }
  return nullptr;
}

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw Error(path + ": " + problem);
}

// The 8-byte little-endian length that opens the file.
uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses one header entry {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} and checks
// it on its own; checks against the file size come later.
SafetensorsFile::Entry parse_entry(const std::string& path, const std::string& name, const json& j) {
  const std::string where = "tensor '" + name + "': ";
  if (!j.is_object()) fail(path, where + "header entry is not a JSON object");

  auto dtype_it = j.find("dtype");
  if (dtype_it == j.end() || !dtype_it->is_string()) fail(path, where + "missing or malformed 'dtype'");
  const std::string dtype_name = dtype_it->get<std::string>();
  const DtypeInfo* info = find_dtype(dtype_name);
  if (!info) fail(path, where + "unknown dtype '" + dtype_name + "'");

  SafetensorsFile::Entry entry;
  entry.dtype = info->dtype;

  auto shape_it = j.find("shape");
  if (shape_it == j.end() || !shape_it->is_array()) fail(path, where + "missing or malformed 'shape'");
  uint64_t bytes = info->itemsize;
  for (const json& dim : *shape_it) {
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail(path, where + "shape " + shape_it->dump() + " is not a list of non-negative integers");
    }
    const uint64_t d = dim.get<uint64_t>();
    if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / d) {
      fail(path, where + "shape " + shape_it->dump() + " is too large");
    }
    bytes *= d;
    entry.shape.push_back(int64_t(d));
  }

  auto offsets_it = j.find("data_offsets");
  if (offsets_it == j.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    fail(path, where + "missing or malformed 'data_offsets'");
  }
  entry.begin = (*offsets_it)[0].get<uint64_t>();
  entry.end = (*offsets_it)[1].get<uint64_t>();
  if (entry.begin > entry.end) fail(path, where + "data_offsets " + offsets_it->dump() + " are reversed");
  if (entry.end - entry.begin != bytes) {
    fail(path, where + "shape " + shape_string(entry.shape) + " of " + dtype_name + " is " +
                   std::to_string(bytes) + " bytes but data_offsets " + offsets_it->dump() + " hold " +
                   std::to_string(entry.end - entry.begin));
  }
  return entry;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& j) {
  if (!j.is_object()) fail(path, "'__metadata__' is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) fail(path, "'__metadata__' value of '" + key + "' is not a string");
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

// Every tensor must end inside the data section, and no two tensors may share bytes.
void check_layout(const std::string& path, const std::map<std::string, SafetensorsFile::Entry>& entries,
                  uint64_t data_size) {
  std::vector<std::pair<const std::string*, const SafetensorsFile::Entry*>> by_offset;
  uint64_t data_end = 0;
  for (const auto& [name, entry] : entries) {
    data_end = std::max(data_end, entry.end);
    if (entry.end > entry.begin) by_offset.emplace_back(&name, &entry);
  }
  if (data_end > data_size) {
    fail(path, "truncated: header says " + std::to_string(data_end) + " bytes of data, file has " +
                   std::to_string(data_size));
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i].second->begin < by_offset[i - 1].second->end) {
      fail(path, "tensors '" + *by_offset[i - 1].first + "' and '" + *by_offset[i].first + "' overlap");
    }
  }
}

}  // namespace

torch::Dtype safetensors_dtype(const std::string& name) {
  const DtypeInfo* info = find_dtype(name);
  if (!info) throw Error("unknown safetensors dtype '" + name + "'");
  return info->dtype;
}

std::string safetensors_dtype_name(torch::Dtype dtype) {
  const DtypeInfo* info = find_dtype(dtype);
  if (!info) throw Error(std::string("dtype ") + c10::toString(dtype) + " has no safetensors name");
  return info->name;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  const uint64_t file_size = uint64_t(st.st_size);
  if (file_size == 0) {
    ::close(fd);
    fail(path, "empty file");
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  if (map == MAP_FAILED) fail(path, std::string("cannot mmap: ") + std::strerror(map_errno));
  map_ = map;
  map_size_ = file_size;

  // From here on the destructor does not run if we throw, so unmap on the way out.
  try {
    const auto* bytes = static_cast<const uint8_t*>(map_);
    if (file_size < 8) {
      fail(path, "truncated: " + std::to_string(file_size) + " bytes, too short for the 8-byte header length");
    }
    const uint64_t header_size = read_u64_le(bytes);
    if (header_size > file_size - 8) {
      fail(path, "header length " + std::to_string(header_size) + " exceeds the " +
                     std::to_string(file_size - 8) + " bytes after the length field");
    }
    const char* header = reinterpret_cast<const char*>(bytes + 8);
    json j;
    try {
      j = json::parse(header, header + header_size);
    } catch (const json::parse_error& e) {
      fail(path, std::string("invalid JSON header: ") + e.what());
    }
    if (!j.is_object()) fail(path, "header is not a JSON object");

    for (const auto& [name, value] : j.items()) {
      if (name == "__metadata__") {
        metadata_ = parse_metadata(path, value);
      } else {
        entries_.emplace(name, parse_entry(path, name, value));
      }
    }
    data_ = bytes + 8 + header_size;
    check_layout(path, entries_, file_size - 8 - header_size);
  } catch (...) {
    ::munmap(map_, map_size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      entries_(std::move(other.entries_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(map_, map_size_);
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    entries_ = std::move(other.entries_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;  // std::map keeps them sorted
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(path_, "no tensor '" + name + "'");
  return it->second;
}

torch::Tensor SafetensorsFile::read(const std::string& name) const {
  const Entry& e = entry(name);
  torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
  if (e.end > e.begin) std::memcpy(t.data_ptr(), data_ + e.begin, e.end - e.begin);
  return t;
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // The format lays tensors out in name order.
  std::map<std::string, torch::Tensor> sorted;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") fail(path, "'__metadata__' cannot name a tensor");
    if (!find_dtype(tensor.scalar_type())) {
      fail(path, "tensor '" + name + "' has dtype " + c10::toString(tensor.scalar_type()) +
                     ", which safetensors cannot store");
    }
    if (!sorted.emplace(name, tensor.detach().to(torch::kCPU).contiguous()).second) {
      fail(path, "tensor name '" + name + "' appears twice");
    }
  }

  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : sorted) {
    const uint64_t bytes = t.nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  // Pad the header with spaces (JSON whitespace) so the data section starts 8-byte aligned.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail(path, std::string("cannot write: ") + std::strerror(errno));
  bool ok = std::fwrite(length, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (auto it = sorted.begin(); ok && it != sorted.end(); ++it) {
    const size_t bytes = it->second.nbytes();
    ok = bytes == 0 || std::fwrite(it->second.data_ptr(), 1, bytes, f) == bytes;
  }
  ok = std::fclose(f) == 0 && ok;
  if (!ok) fail(path, std::string("cannot write: ") + std::strerror(errno));
}

}  // namespace gemma4
