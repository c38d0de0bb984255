// Tests of reference/safetensors: round trips through write_safetensors and SafetensorsFile, a
// file laid out by Python's `safetensors` library, and damaged files that must be refused with a
// one-line gemma4::Error naming the file and the problem.
#include "reference/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "reference/error.h"
#include "reference/files.h"

namespace gemma4 {
namespace {

// A file path under the test temp dir, unique to the running test.
std::string temp_path(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return ::testing::TempDir() + "safetensors_" + info->name() + "_" + name;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A safetensors file by hand: 8-byte little-endian header length, header text, data bytes.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return bytes + header + data;
}

// Opens `path` expecting a gemma4::Error; returns its message ("" after a test failure).
std::string open_error(const std::string& path) {
  try {
    SafetensorsFile file(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "opening " << path << " did not throw gemma4::Error";
  return "";
}

// The message names the file and contains `phrase`, on one line.
void expect_message(const std::string& message, const std::string& path, const std::string& phrase) {
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find(phrase), std::string::npos) << "wanted '" << phrase << "' in: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// Writes `header` + `data` as a file and checks that opening it fails with `phrase`.
void expect_refused(const std::string& header, const std::string& data, const std::string& phrase) {
  const std::string path = temp_path("damaged.safetensors");
  write_bytes(path, raw_file(header, data));
  expect_message(open_error(path), path, phrase);
}

// Six distinct values that `dtype` represents exactly, shaped [2, 3].
torch::Tensor sample(torch::Dtype dtype) {
  if (dtype == torch::kBool) return torch::tensor({true, false, true, true, false, false}).reshape({2, 3});
  if (dtype == torch::kUInt8) return torch::tensor({0, 1, 2, 127, 200, 255}).to(dtype).reshape({2, 3});
  if (torch::isFloatingType(dtype)) {
    return torch::tensor({0.0, -1.5, 2.25, 1024.0, -0.125, 3.0}).to(dtype).reshape({2, 3});
  }
  return torch::tensor({0, -1, 2, 127, -128, 3}).to(dtype).reshape({2, 3});
}

void expect_same(const torch::Tensor& actual, const torch::Tensor& expected) {
  EXPECT_EQ(actual.scalar_type(), expected.scalar_type());
  EXPECT_EQ(actual.sizes(), expected.sizes());
  EXPECT_TRUE(actual.device().is_cpu());
  EXPECT_TRUE(torch::equal(actual, expected.cpu())) << actual << "\nvs\n" << expected;
}

TEST(Safetensors, DtypeNamesMapBothWays) {
  const std::pair<const char*, torch::Dtype> names[] = {
      {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
      {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
      {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};
  for (const auto& [name, dtype] : names) {
    EXPECT_EQ(safetensors_dtype(name), dtype) << name;
    EXPECT_EQ(safetensors_dtype_name(dtype), name) << name;
  }
  EXPECT_THROW(safetensors_dtype("F8_E4M3"), Error);
  EXPECT_THROW(safetensors_dtype_name(torch::kComplexFloat), Error);
}

TEST(Safetensors, RoundTripsEveryDtype) {
  const torch::Dtype dtypes[] = {torch::kFloat64, torch::kFloat32, torch::kFloat16, torch::kBFloat16,
                                 torch::kInt64,   torch::kInt32,   torch::kInt16,   torch::kInt8,
                                 torch::kUInt8,   torch::kBool};
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (torch::Dtype dtype : dtypes) tensors.emplace_back(safetensors_dtype_name(dtype), sample(dtype));
  const std::string path = temp_path("all.safetensors");
  write_safetensors(path, tensors);

  SafetensorsFile file(path);
  ASSERT_EQ(file.names().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.contains(name));
    EXPECT_EQ(file.entry(name).dtype, expected.scalar_type());
    EXPECT_EQ(file.entry(name).shape, (std::vector<int64_t>{2, 3}));
    expect_same(file.read(name), expected);
  }
}

TEST(Safetensors, RoundTripsScalarsEmptyAndStridedTensors) {
  const torch::Tensor scalar = torch::tensor(2.5, torch::kBFloat16);  // 0-d
  const torch::Tensor empty = torch::zeros({0, 4}, torch::kFloat32);
  const torch::Tensor strided = torch::arange(12, torch::kInt64).reshape({3, 4}).t();
  const std::string path = temp_path("shapes.safetensors");
  write_safetensors(path, {{"scalar", scalar}, {"empty", empty}, {"strided", strided}});

  SafetensorsFile file(path);
  EXPECT_TRUE(file.entry("scalar").shape.empty());
  EXPECT_EQ(file.entry("empty").begin, file.entry("empty").end);
  expect_same(file.read("scalar"), scalar);
  expect_same(file.read("empty"), empty);
  expect_same(file.read("strided"), strided);
}

TEST(Safetensors, WritesSortedNamesMetadataAndAlignedHeader) {
  const std::string path = temp_path("meta.safetensors");
  write_safetensors(path, {{"zeta", torch::ones({3}, torch::kUInt8)}, {"alpha", torch::ones({1})}},
                    {{"format", "pt"}, {"note", "hello world"}});

  SafetensorsFile file(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"alpha", "zeta"}));
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hello world"}}));
  // Tensors are laid out in name order.
  EXPECT_EQ(file.entry("alpha").begin, 0u);
  EXPECT_EQ(file.entry("zeta").begin, 4u);
  // The header is padded so the data section starts at a multiple of 8.
  std::ifstream in(path, std::ios::binary);
  unsigned char length_bytes[8];
  in.read(reinterpret_cast<char*>(length_bytes), 8);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  EXPECT_EQ((8 + length) % 8, 0u);
}

TEST(Safetensors, TensorOutlivesTheFile) {
  const std::string path = temp_path("copy.safetensors");
  write_safetensors(path, {{"w", torch::arange(5, torch::kFloat32)}});
  torch::Tensor w;
  {
    SafetensorsFile file(path);
    SafetensorsFile moved(std::move(file));
    w = moved.read("w");
  }
  expect_same(w, torch::arange(5, torch::kFloat32));
}

// These bytes are what Python's `safetensors` 0.8 writes for
//   save({"w.bf16": bf16 [1.5, -2.0], "n": int64 7 (0-d), "mask": bool [T, F, T],
//         "x": f32 [[0.25, -1.0, 3.0]]}, metadata={"format": "pt"})
// It orders the data by alignment, not by name, and pads the header with spaces.
TEST(Safetensors, ReadsTheLayoutPythonWrites) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"n":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("x":{"dtype":"F32","shape":[1,3],"data_offsets":[8,20]},)"
      R"("w.bf16":{"dtype":"BF16","shape":[2],"data_offsets":[20,24]},)"
      R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[24,27]}}    )";
  const unsigned char data[] = {0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // n
                                0x00, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x80, 0xbf,  // x
                                0x00, 0x00, 0x40, 0x40,                          //
                                0xc0, 0x3f, 0x00, 0xc0,                          // w.bf16
                                0x01, 0x00, 0x01};                               // mask
  const std::string path = temp_path("python.safetensors");
  write_bytes(path, raw_file(header, std::string(reinterpret_cast<const char*>(data), sizeof data)));

  SafetensorsFile file(path);
  EXPECT_EQ(file.names(), (std::vector<std::string>{"mask", "n", "w.bf16", "x"}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  expect_same(file.read("n"), torch::tensor(7, torch::kInt64));
  expect_same(file.read("x"), torch::tensor({0.25f, -1.0f, 3.0f}).reshape({1, 3}));
  expect_same(file.read("w.bf16"), torch::tensor({1.5, -2.0}, torch::kBFloat16));
  expect_same(file.read("mask"), torch::tensor({true, false, true}));
}

TEST(Safetensors, UnknownTensorNameIsAnError) {
  const std::string path = temp_path("one.safetensors");
  write_safetensors(path, {{"w", torch::ones({2})}});
  SafetensorsFile file(path);
  EXPECT_FALSE(file.contains("v"));
  try {
    file.read("v");
    ADD_FAILURE() << "read of a missing tensor did not throw";
  } catch (const Error& e) {
    expect_message(e.what(), path, "no tensor 'v'");
  }
}

TEST(SafetensorsDamage, MissingFile) {
  const std::string path = temp_path("does_not_exist.safetensors");
  expect_message(open_error(path), path, "cannot open: No such file");
}

TEST(SafetensorsDamage, EmptyFile) {
  const std::string path = temp_path("empty.safetensors");
  write_bytes(path, "");
  expect_message(open_error(path), path, "empty file");
}

TEST(SafetensorsDamage, ShorterThanTheLengthField) {
  const std::string path = temp_path("short.safetensors");
  write_bytes(path, "abc");
  expect_message(open_error(path), path, "too short for the 8-byte header length");
}

// Exactly the length field and nothing else: long enough to read the length (0), so the error
// is about the empty header, not a truncated length field.
TEST(SafetensorsDamage, OnlyTheLengthField) {
  const std::string path = temp_path("length_only.safetensors");
  write_bytes(path, std::string(8, '\0'));
  const std::string message = open_error(path);
  expect_message(message, path, "invalid JSON header");
  EXPECT_EQ(message.find("too short"), std::string::npos) << message;
}

TEST(SafetensorsDamage, HeaderLengthLargerThanFile) {
  const std::string path = temp_path("long_header.safetensors");
  std::string bytes = raw_file("{}", "");
  bytes[0] = char(200);  // claims a 200-byte header
  write_bytes(path, bytes);
  expect_message(open_error(path), path, "header length 200 exceeds the 2 bytes");
}

TEST(SafetensorsDamage, InvalidJson) {
  expect_refused(R"({"w": {"dtype": "F32",)", "", "invalid JSON header");
}

TEST(SafetensorsDamage, HeaderNotAnObject) {
  expect_refused("[1, 2]", "", "header is not a JSON object");
}

TEST(SafetensorsDamage, UnknownDtype) {
  expect_refused(R"({"w": {"dtype": "F8", "shape": [1], "data_offsets": [0, 1]}})", "x",
                 "tensor 'w': unknown dtype 'F8'");
}

TEST(SafetensorsDamage, MissingField) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1]}})", "abcd", "tensor 'w': missing or malformed 'data_offsets'");
}

// Each half of "missing or malformed": a mutation that joins them with && instead of || survived
// the suite (conformance/quality/mutation).
TEST(SafetensorsDamage, MissingShape) {
  expect_refused(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", "abcd", "tensor 'w': missing or malformed 'shape'");
}

TEST(SafetensorsDamage, ShapeNotAList) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", "abcd",
                 "tensor 'w': missing or malformed 'shape'");
}

TEST(SafetensorsDamage, NegativeBeginOffset) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-1, 4]}})", "abcd",
                 "tensor 'w': missing or malformed 'data_offsets'");
}

TEST(SafetensorsDamage, NegativeDimension) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", "abcd",
                 "is not a list of non-negative integers");
}

// A shape whose byte count overflows 64 bits is refused before the product wraps around.
TEST(SafetensorsDamage, ShapeTooLarge) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", "",
                 "tensor 'w': shape [4294967296,4294967296] is too large");
}

TEST(SafetensorsDamage, ShapeDisagreesWithByteSize) {
  expect_refused(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", std::string(20, 'x'),
                 "tensor 'w': shape [2, 3] of F32 is 24 bytes but data_offsets [0,20] hold 20");
}

TEST(SafetensorsDamage, ReversedOffsets) {
  expect_refused(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [4, 0]}})", "abcd",
                 "data_offsets [4,0] are reversed");
}

TEST(SafetensorsDamage, OffsetsBeyondTheData) {
  expect_refused(R"({"w": {"dtype": "F64", "shape": [8], "data_offsets": [0, 64]}})", std::string(8, 'x'),
                 "truncated: header says 64 bytes of data, file has 8");
}

TEST(SafetensorsDamage, OverlappingTensors) {
  expect_refused(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                 R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                 std::string(12, 'x'), "tensors 'a' and 'b' overlap");
}

TEST(SafetensorsDamage, MetadataNotStrings) {
  expect_refused(R"({"__metadata__": {"step": 3}})", "", "'__metadata__' value of 'step' is not a string");
}

TEST(SafetensorsDamage, TruncatedFile) {
  const std::string path = temp_path("truncated.safetensors");
  write_safetensors(path, {{"w", torch::ones({100}, torch::kFloat32)}});
  files::truncate_file(path, files::file_size(path) - 80);
  expect_message(open_error(path), path, "truncated: header says 400 bytes of data, file has 320");
}

TEST(SafetensorsWrite, RefusesUnsupportedDtype) {
  const std::string path = temp_path("complex.safetensors");
  try {
    write_safetensors(path, {{"z", torch::zeros({2}, torch::kComplexFloat)}});
    ADD_FAILURE() << "writing a complex tensor did not throw";
  } catch (const Error& e) {
    expect_message(e.what(), path, "tensor 'z' has dtype ComplexFloat, which safetensors cannot store");
  }
}

TEST(SafetensorsWrite, RefusesDuplicateNames) {
  const std::string path = temp_path("dup.safetensors");
  EXPECT_THROW(write_safetensors(path, {{"w", torch::ones({1})}, {"w", torch::ones({1})}}), Error);
}

TEST(SafetensorsWrite, UnwritablePath) {
  const std::string path = temp_path("no_such_dir") + "/x.safetensors";
  try {
    write_safetensors(path, {{"w", torch::ones({1})}});
    ADD_FAILURE() << "writing into a missing directory did not throw";
  } catch (const Error& e) {
    expect_message(e.what(), path, "cannot write");
  }
}

}  // namespace
}  // namespace gemma4
