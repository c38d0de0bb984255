// Tests of golden/h5_tensors: tensors and attributes written with gemma4::h5::File and read back
// after the file is closed, and missing or damaged files refused with a one-line gemma4::Error.
#include "golden/h5_tensors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>

#include "golden/tests/test_files.h"
#include "reference/error.h"
#include "reference/files.h"

namespace gemma4::h5 {
namespace {

using test::error_of;
using test::temp_path;

// The message names the file and contains `phrase`, on one line.
void expect_message(const std::string& message, const std::string& path, const std::string& phrase) {
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(phrase), std::string::npos) << "wanted '" << phrase << "' in: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

void expect_same(const torch::Tensor& actual, const torch::Tensor& expected) {
  EXPECT_EQ(actual.scalar_type(), expected.scalar_type());
  EXPECT_EQ(actual.sizes(), expected.sizes());
  EXPECT_TRUE(actual.device().is_cpu());
  EXPECT_TRUE(torch::equal(actual, expected)) << actual << "\nvs\n" << expected;
}

// Writes `tensor` as `name` into a fresh file, closes it, and reads it back.
torch::Tensor round_trip(const torch::Tensor& tensor, const std::string& name = "t") {
  const std::string path = temp_path("round_trip.h5");
  File::create(path).write(name, tensor);
  return File::open_read(path).read(name);
}

TEST(H5Tensors, RoundTripsStoredTypesAsTheyAre) {
  const torch::Tensor values = torch::tensor({0.0, -1.5, 2.25, 1e30, -0.125, 3.0}).reshape({2, 3});
  expect_same(round_trip(values.to(torch::kFloat32)), values.to(torch::kFloat32));
  expect_same(round_trip(values), values);
  const torch::Tensor longs = torch::tensor(std::vector<int64_t>{0, -1, 2, int64_t(1) << 40});
  expect_same(round_trip(longs), longs);
  const torch::Tensor ints = torch::tensor({0, -1, 2, 123456}, torch::kInt32);
  expect_same(round_trip(ints), ints);
  const torch::Tensor bytes = torch::tensor({0, 7, 255}).to(torch::kUInt8);
  expect_same(round_trip(bytes), bytes);
}

TEST(H5Tensors, WidensHalfPrecisionAndStoresBoolAsUint8) {
  const torch::Tensor values = torch::tensor({1.5, -2.0, 0.0078125, 65504.0});
  expect_same(round_trip(values.to(torch::kBFloat16)), values.to(torch::kBFloat16).to(torch::kFloat32));
  expect_same(round_trip(values.to(torch::kFloat16)), values.to(torch::kFloat16).to(torch::kFloat32));
  expect_same(round_trip(torch::tensor({true, false, true})), torch::tensor({1, 0, 1}).to(torch::kUInt8));
}

TEST(H5Tensors, RoundTripsScalarsEmptyAndStridedTensors) {
  expect_same(round_trip(torch::tensor(2.5)), torch::tensor(2.5));  // 0-d stays 0-d
  expect_same(round_trip(torch::zeros({0, 3}, torch::kFloat32)), torch::zeros({0, 3}, torch::kFloat32));
  const torch::Tensor strided = torch::arange(12, torch::kInt64).reshape({3, 4}).t();
  expect_same(round_trip(strided), strided.contiguous());
}

TEST(H5Tensors, NestedGroupsAndDottedNames) {
  const std::string path = temp_path("nested.h5");
  {
    File file = File::create(path);
    file.write("grads/model.layers.0.mlp.up_proj.weight", torch::ones({2, 2}));
    file.write("grads/model.embed_tokens.weight", torch::zeros({3}));
    file.write("hidden_states/3", torch::full({4}, 3.0));
    file.write("hidden_states/10", torch::full({4}, 10.0));
    file.write("a/b/c/deep", torch::tensor(int64_t(5)));
  }
  const File file = File::open_read(path);
  EXPECT_TRUE(file.exists("grads"));
  EXPECT_TRUE(file.exists("/a/b/c/deep"));
  EXPECT_FALSE(file.exists("grads/model"));
  EXPECT_FALSE(file.exists("nope/deeper"));
  EXPECT_EQ(file.children("/"), (std::vector<std::string>{"a", "grads", "hidden_states"}));
  EXPECT_EQ(file.children("grads"),
            (std::vector<std::string>{"model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"}));
  EXPECT_EQ(file.children("hidden_states"), (std::vector<std::string>{"10", "3"}));
  expect_same(file.read("grads/model.layers.0.mlp.up_proj.weight"), torch::ones({2, 2}));
  expect_same(file.read("hidden_states/10"), torch::full({4}, 10.0));
  expect_same(file.read("a/b/c/deep"), torch::tensor(int64_t(5)));
}

TEST(H5Tensors, AttributesOnRootAndOnADataset) {
  const std::string path = temp_path("attrs.h5");
  {
    File file = File::create(path);
    file.write("logits", torch::zeros({2}));
    file.set_attr("/", "model", std::string("gemma-4 tiny"));
    file.set_attr("/", "tolerance", 1e-5);
    file.set_attr("/", "seed", int64_t(1234567890123));
    file.set_attr("logits", "dtype", std::string("float32"));
    file.set_attr("logits", "scale", 0.5);
    file.set_attr("logits", "step", int64_t(-7));
    file.set_attr("logits", "step", int64_t(8));  // replaces the first value
  }
  const File file = File::open_read(path);
  EXPECT_TRUE(file.has_attr("/", "model"));
  EXPECT_FALSE(file.has_attr("/", "absent"));
  EXPECT_FALSE(file.has_attr("no_such_object", "model"));
  EXPECT_EQ(file.attr_string("/", "model"), "gemma-4 tiny");
  EXPECT_EQ(file.attr_double("/", "tolerance"), 1e-5);
  EXPECT_EQ(file.attr_int("/", "seed"), 1234567890123);
  EXPECT_EQ(file.attr_string("logits", "dtype"), "float32");
  EXPECT_EQ(file.attr_double("logits", "scale"), 0.5);
  EXPECT_EQ(file.attr_int("logits", "step"), 8);
  EXPECT_EQ(file.attr_double("logits", "step"), 8.0);  // integers read as doubles too
}

TEST(H5Tensors, AttributeErrors) {
  const std::string path = temp_path("attr_errors.h5");
  File file = File::create(path);
  file.set_attr("/", "name", std::string("x"));
  file.set_attr("/", "ratio", 0.25);
  expect_message(error_of([&] { file.attr_string("/", "absent"); }), path, "no attribute 'absent' on '/'");
  expect_message(error_of([&] { file.attr_int("/", "ratio"); }), path, "attribute 'ratio' on '/' is not an integer");
  expect_message(error_of([&] { file.attr_double("/", "name"); }), path, "is not a number");
  expect_message(error_of([&] { file.attr_string("/", "ratio"); }), path, "is not a string");
  expect_message(error_of([&] { file.set_attr("missing", "a", 1.0); }), path, "no object 'missing'");
}

TEST(H5Tensors, DatasetErrors) {
  const std::string path = temp_path("out.h5");
  File file = File::create(path);
  file.write("grads/w", torch::ones({1}));
  expect_message(error_of([&] { file.read("grads/x"); }), path, "no dataset 'grads/x'");
  expect_message(error_of([&] { file.read("grads"); }), path, "'grads' is not a dataset");
  expect_message(error_of([&] { file.children("grads/w"); }), path, "'grads/w' is not a group");
  expect_message(error_of([&] { file.children("nope"); }), path, "no group 'nope'");
  expect_message(error_of([&] { file.write("grads/w", torch::ones({1})); }), path, "'grads/w' already exists");
  expect_message(error_of([&] { file.write("z", torch::zeros({1}, torch::kComplexFloat)); }), path,
                 "dataset 'z': cannot store dtype ComplexFloat");
}

TEST(H5Tensors, MoveKeepsTheFileOpen) {
  const std::string path = temp_path("move.h5");
  File first = File::create(path);
  File second = std::move(first);
  second.write("x", torch::ones({2}));
  File third = File::create(temp_path("other.h5"));
  third = std::move(second);
  EXPECT_EQ(third.path(), path);
  expect_same(third.read("x"), torch::ones({2}));
}

TEST(H5Tensors, MissingFile) {
  const std::string path = temp_path("missing.h5");
  expect_message(error_of([&] { File::open_read(path); }), path, "no such file");
}

TEST(H5Tensors, GarbageAndEmptyFiles) {
  const std::string garbage = temp_path("garbage.h5");
  std::ofstream(garbage, std::ios::binary) << std::string(4096, 'g');
  expect_message(error_of([&] { File::open_read(garbage); }), garbage, "not an HDF5 file");

  const std::string empty = temp_path("empty.h5");
  std::ofstream(empty, std::ios::binary).close();
  expect_message(error_of([&] { File::open_read(empty); }), empty, "not an HDF5 file");
}

TEST(H5Tensors, TruncatedFile) {
  const std::string path = temp_path("truncated.h5");
  File::create(path).write("big", torch::ones({64, 64}));
  gemma4::files::truncate_file(path, gemma4::files::file_size(path) / 2);
  expect_message(error_of([&] { File::open_read(path); }), path, "damaged or truncated");
}

}  // namespace
}  // namespace gemma4::h5
