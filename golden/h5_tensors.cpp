#include "golden/h5_tensors.h"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "reference/error.h"
#include "reference/files.h"

namespace gemma4::h5 {
namespace {

static_assert(std::is_same_v<hid_t, int64_t>, "File stores its hid_t in an int64_t");

// Owns one HDF5 identifier and releases it with the matching H5?close function.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), close_(other.close_) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw Error(path + ": " + problem);
}

// HDF5 prints its error stack to stderr on every failed call unless told not to; we report
// failures as gemma4::Error instead.
void silence_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string quoted(const std::string& name) { return "'" + name + "'"; }

// The HDF5 memory type of the tensor dtypes stored as they are, or -1 for any other dtype.
hid_t hdf5_type(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat32: return H5T_NATIVE_FLOAT;
    case torch::kFloat64: return H5T_NATIVE_DOUBLE;
    case torch::kInt64: return H5T_NATIVE_INT64;
    case torch::kInt32: return H5T_NATIVE_INT32;
    case torch::kInt16: return H5T_NATIVE_INT16;
    case torch::kInt8: return H5T_NATIVE_INT8;
    case torch::kUInt8: return H5T_NATIVE_UINT8;
    default: return -1;
  }
}

// The tensor dtype that holds a stored HDF5 type, if there is one.
std::optional<torch::Dtype> tensor_dtype(hid_t type) {
  const size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      if (size == 4) return torch::kFloat32;
      if (size == 8) return torch::kFloat64;
      return std::nullopt;
    case H5T_INTEGER:
      if (H5Tget_sign(type) == H5T_SGN_NONE) {
        if (size == 1) return torch::kUInt8;
        return std::nullopt;
      }
      if (size == 1) return torch::kInt8;
      if (size == 2) return torch::kInt16;
      if (size == 4) return torch::kInt32;
      if (size == 8) return torch::kInt64;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

// The tensor as it is stored: on the CPU, contiguous, bf16/f16 widened to f32, bool as uint8.
torch::Tensor storable(const torch::Tensor& tensor) {
  torch::Tensor t = tensor.detach().to(torch::kCPU);
  if (t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kFloat16) {
    t = t.to(torch::kFloat32);
  } else if (t.scalar_type() == torch::kBool) {
    t = t.to(torch::kUInt8);
  }
  return t.contiguous();
}

// A 0-d tensor gets a scalar dataspace, anything else a simple one of its shape.
Handle dataspace_of(const torch::Tensor& t) {
  if (t.dim() == 0) return Handle(H5Screate(H5S_SCALAR), H5Sclose);
  const std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
  return Handle(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
}

// True when every link on the slash-separated path exists. H5Lexists fails, rather than answering
// false, when a parent group is missing, so walk down one link at a time.
bool object_exists(hid_t file, const std::string& object) {
  std::string prefix;
  size_t start = 0;
  while (start <= object.size()) {
    const size_t slash = std::min(object.find('/', start), object.size());
    if (slash > start) {
      prefix += "/" + object.substr(start, slash - start);
      if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    start = slash + 1;
  }
  return true;
}

enum class Kind { Object, Group, Dataset };

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Group: return "group";
    case Kind::Dataset: return "dataset";
    default: return "object";
  }
}

// Opens an object that must exist and, for Group or Dataset, be of that kind.
Handle open_object(const std::string& path, hid_t file, const std::string& object, Kind kind) {
  if (!object_exists(file, object)) fail(path, std::string("no ") + kind_name(kind) + " " + quoted(object));
  Handle h(H5Oopen(file, object.c_str(), H5P_DEFAULT), H5Oclose);
  if (!h.valid()) fail(path, "cannot open " + quoted(object));
  const H5I_type_t type = H5Iget_type(h.get());
  if ((kind == Kind::Group && type != H5I_GROUP) || (kind == Kind::Dataset && type != H5I_DATASET)) {
    fail(path, quoted(object) + " is not a " + kind_name(kind));
  }
  return h;
}

std::string attr_where(const std::string& object, const std::string& name) {
  return "attribute " + quoted(name) + " on " + quoted(object);
}

// Writes a one-value attribute, replacing any attribute of that name.
void write_attr(const std::string& path, hid_t file, const std::string& object, const std::string& name,
                hid_t type, const void* value) {
  const Handle obj = open_object(path, file, object, Kind::Object);
  if (H5Aexists(obj.get(), name.c_str()) > 0 && H5Adelete(obj.get(), name.c_str()) < 0) {
    fail(path, "cannot replace " + attr_where(object, name));
  }
  const Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  const Handle attr(H5Acreate2(obj.get(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid() || H5Awrite(attr.get(), type, value) < 0) fail(path, "cannot write " + attr_where(object, name));
}

// Opens an existing attribute that holds a single value.
Handle open_attr(const std::string& path, hid_t file, const std::string& object, const std::string& name) {
  if (!object_exists(file, object)) fail(path, "no object " + quoted(object));
  if (H5Aexists_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT) <= 0) {
    fail(path, "no " + attr_where(object, name));
  }
  Handle attr(H5Aopen_by_name(file, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) fail(path, "cannot open " + attr_where(object, name));
  const Handle space(H5Aget_space(attr.get()), H5Sclose);
  if (H5Sget_simple_extent_npoints(space.get()) != 1) fail(path, attr_where(object, name) + " is not a single value");
  return attr;
}

// Reads a numeric attribute through HDF5's conversion to `mem_type`, after checking its class.
template <typename T>
T read_number_attr(const std::string& path, hid_t file, const std::string& object, const std::string& name,
                   hid_t mem_type, bool allow_float) {
  const Handle attr = open_attr(path, file, object, name);
  const Handle type(H5Aget_type(attr.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type.get());
  if (cls != H5T_INTEGER && !(allow_float && cls == H5T_FLOAT)) {
    fail(path, attr_where(object, name) + (allow_float ? " is not a number" : " is not an integer"));
  }
  T value{};
  if (H5Aread(attr.get(), mem_type, &value) < 0) fail(path, "cannot read " + attr_where(object, name));
  return value;
}

}  // namespace

File File::create(const std::string& path) {
  silence_hdf5_errors();
  const Handle file_props(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  H5Pset_obj_track_times(file_props.get(), 0);  // the root group's timestamps (see write)
  // The HDF5 1.10 file format: a dataset stored in one chunk needs no chunk index (B-tree) then.
  const Handle access_props(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(access_props.get(), H5F_LIBVER_V110, H5F_LIBVER_V110);
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, file_props.get(), access_props.get());
  if (id < 0) fail(path, "cannot create HDF5 file");
  return File(path, id);
}

File File::open_read(const std::string& path) {
  silence_hdf5_errors();
  if (files::is_directory(path)) fail(path, "is a folder, not a file");
  if (!files::is_file(path)) fail(path, "no such file");
  if (H5Fis_hdf5(path.c_str()) <= 0) fail(path, "not an HDF5 file");
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) fail(path, "cannot open: damaged or truncated HDF5 file");
  return File(path, id);
}

File::~File() {
  if (id_ >= 0) H5Fclose(id_);
}

File::File(File&& other) noexcept : path_(std::move(other.path_)), id_(std::exchange(other.id_, -1)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (id_ >= 0) H5Fclose(id_);
    path_ = std::move(other.path_);
    id_ = std::exchange(other.id_, -1);
  }
  return *this;
}

void File::write(const std::string& dataset, const torch::Tensor& tensor) {
  const torch::Tensor t = storable(tensor);
  const hid_t type = hdf5_type(t.scalar_type());
  if (type < 0) {
    fail(path_, "dataset " + quoted(dataset) + ": cannot store dtype " + c10::toString(tensor.scalar_type()));
  }
  if (object_exists(id_, dataset)) fail(path_, quoted(dataset) + " already exists");

  // No object timestamps, so that writing the same tensors twice gives byte-identical files.
  const Handle group_props(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  H5Pset_obj_track_times(group_props.get(), 0);
  for (size_t slash = dataset.find('/'); slash != std::string::npos; slash = dataset.find('/', slash + 1)) {
    const std::string group = dataset.substr(0, slash);
    if (group.empty() || object_exists(id_, group)) continue;
    const Handle g(H5Gcreate2(id_, group.c_str(), H5P_DEFAULT, group_props.get(), H5P_DEFAULT), H5Gclose);
    if (!g.valid()) fail(path_, "cannot create group " + quoted(group));
  }
  const Handle space = dataspace_of(t);
  const Handle dataset_props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_obj_track_times(dataset_props.get(), 0);
  // Compressed in one chunk (byte shuffle + deflate): values widened from bf16/f16 have all-zero
  // low mantissa bytes, which then cost almost nothing. Readers decompress transparently.
  // Tensors over 64 MiB (real-geometry goldens) stay contiguous: deflate would take minutes.
  if (t.numel() >= 256 && t.nbytes() <= (int64_t{64} << 20) && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
    const std::vector<hsize_t> chunk(t.sizes().begin(), t.sizes().end());
    H5Pset_chunk(dataset_props.get(), static_cast<int>(chunk.size()), chunk.data());
    H5Pset_shuffle(dataset_props.get());
    H5Pset_deflate(dataset_props.get(), 6);
  }
  const Handle dset(
      H5Dcreate2(id_, dataset.c_str(), type, space.get(), H5P_DEFAULT, dataset_props.get(), H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) fail(path_, "cannot create dataset " + quoted(dataset));
  // An empty tensor may have no buffer at all; its dataset needs no write.
  if (t.numel() > 0 && H5Dwrite(dset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0) {
    fail(path_, "cannot write dataset " + quoted(dataset));
  }
}

// The largest dataset read: far above any golden (a real/* case's logits are under 8 GiB).
constexpr uint64_t kMaxDatasetBytes = uint64_t(64) << 30;

torch::Tensor File::read(const std::string& dataset) const {
  const Handle dset = open_object(path_, id_, dataset, Kind::Dataset);
  const Handle type(H5Dget_type(dset.get()), H5Tclose);
  const std::optional<torch::Dtype> dtype = tensor_dtype(type.get());
  if (!dtype) fail(path_, "dataset " + quoted(dataset) + " has an HDF5 type this reader does not handle");

  const Handle space(H5Dget_space(dset.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail(path_, "cannot read the shape of dataset " + quoted(dataset));
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  // A damaged header can claim any shape: refuse one no file of this project holds (and that
  // would otherwise fail as an allocation error, or worse, succeed through overcommit).
  const uint64_t item = uint64_t(c10::elementSize(*dtype));
  uint64_t bytes = item;
  for (hsize_t d : dims) bytes = d != 0 && bytes > kMaxDatasetBytes / d ? kMaxDatasetBytes + 1 : bytes * d;
  if (bytes > kMaxDatasetBytes) {
    fail(path_, "dataset " + quoted(dataset) + " claims more than " + std::to_string(kMaxDatasetBytes >> 30) + " GiB");
  }

  torch::Tensor t = torch::empty(std::vector<int64_t>(dims.begin(), dims.end()), torch::TensorOptions().dtype(*dtype));
  if (t.numel() > 0 && H5Dread(dset.get(), hdf5_type(*dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data_ptr()) < 0) {
    fail(path_, "cannot read dataset " + quoted(dataset));
  }
  return t;
}

bool File::exists(const std::string& object) const { return object_exists(id_, object); }

bool File::is_group(const std::string& object) const {
  if (!object_exists(id_, object)) return false;
  const Handle h(H5Oopen(id_, object.c_str(), H5P_DEFAULT), H5Oclose);
  return h.valid() && H5Iget_type(h.get()) == H5I_GROUP;
}

std::vector<std::string> File::children(const std::string& group) const {
  const Handle g = open_object(path_, id_, group, Kind::Group);
  H5G_info_t info{};
  if (H5Gget_info(g.get(), &info) < 0) fail(path_, "cannot list group " + quoted(group));
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    // A first call measures the name, a second fills the buffer.
    const ssize_t size = H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::vector<char> name(size_t(std::max<ssize_t>(size, 0)) + 1);
    if (size < 0 || H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                                       H5P_DEFAULT) < 0) {
      fail(path_, "cannot list group " + quoted(group));
    }
    names.emplace_back(name.data(), size_t(size));
  }
  std::sort(names.begin(), names.end());
  return names;
}

void File::set_attr(const std::string& object, const std::string& name, const std::string& value) {
  // A variable-length UTF-8 string, which h5py reads back as str.
  const Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  const char* chars = value.c_str();
  write_attr(path_, id_, object, name, type.get(), &chars);
}

void File::set_attr(const std::string& object, const std::string& name, double value) {
  write_attr(path_, id_, object, name, H5T_NATIVE_DOUBLE, &value);
}

void File::set_attr(const std::string& object, const std::string& name, int64_t value) {
  write_attr(path_, id_, object, name, H5T_NATIVE_INT64, &value);
}

// False, not an error, when the object itself does not exist.
bool File::has_attr(const std::string& object, const std::string& name) const {
  return object_exists(id_, object) && H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT) > 0;
}

std::string File::attr_string(const std::string& object, const std::string& name) const {
  const Handle attr = open_attr(path_, id_, object, name);
  // Reading with the stored type itself needs no conversion, whatever its character set or padding.
  const Handle type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) fail(path_, attr_where(object, name) + " is not a string");

  if (H5Tis_variable_str(type.get()) > 0) {
    char* chars = nullptr;
    if (H5Aread(attr.get(), type.get(), &chars) < 0) fail(path_, "cannot read " + attr_where(object, name));
    std::string value = chars ? chars : "";
    H5free_memory(chars);
    return value;
  }
  // A fixed-size string: null-terminated or null-padded within its size.
  std::vector<char> chars(H5Tget_size(type.get()));
  if (H5Aread(attr.get(), type.get(), chars.data()) < 0) fail(path_, "cannot read " + attr_where(object, name));
  return std::string(chars.data(), strnlen(chars.data(), chars.size()));
}

double File::attr_double(const std::string& object, const std::string& name) const {
  return read_number_attr<double>(path_, id_, object, name, H5T_NATIVE_DOUBLE, /*allow_float=*/true);
}

int64_t File::attr_int(const std::string& object, const std::string& name) const {
  return read_number_attr<int64_t>(path_, id_, object, name, H5T_NATIVE_INT64, /*allow_float=*/false);
}

}  // namespace gemma4::h5
