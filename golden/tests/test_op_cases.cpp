// The op-case catalogue (golden/op_cases.h): every case runs forward and backward in each dtype,
// inputs are reproducible, and independent checks of the math that a wrong op would fail.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cmath>
#include <functional>
#include <regex>
#include <set>

#include "golden/op_cases.h"
#include "golden/tolerance.h"
#include "reference/error.h"

namespace gemma4::golden {
namespace {

using torch::Tensor;
using Shape = std::vector<int64_t>;

const OpCase& get_case(const std::string& name) {
  const OpCase* c = find_op_case(name);
  if (!c) throw std::runtime_error("no op case " + name);
  return *c;
}

OpResult run_case(const OpCase& c, const OpTensors& t) { return run_op(c.op, c.params, t.inputs, t.upstream); }

OpTensors f32_tensors(const OpCase& c, uint64_t seed = 0) {
  return make_op_tensors(c, seed, torch::kFloat32, torch::kCPU);
}

int64_t p(const OpCase& c, const char* key) { return c.params.at(key).get<int64_t>(); }

// The output shapes the brief documents, written out independently of op_cases.cpp.
std::map<std::string, Shape> documented_output_shapes(const OpCase& c) {
  const int64_t B = p(c, "batch"), S = p(c, "seq_len");
  if (c.op == "rope") {
    const int64_t D = p(c, "head_dim");
    return {{"cos", {S, D}}, {"sin", {S, D}}, {"y", {B, S, p(c, "num_heads"), D}}};
  }
  if (c.op == "qk_norm_rope") {
    const int64_t D = p(c, "head_dim"), Hkv = p(c, "num_key_value_heads");
    return {{"q", {B, S, p(c, "num_attention_heads"), D}}, {"k", {B, Hkv, S, D}}, {"v", {B, Hkv, S, D}}};
  }
  if (c.op == "attention") return {{"out", {B, S, p(c, "num_attention_heads") * p(c, "head_dim")}}};
  if (c.op == "geglu") return {{"out", {B, S, p(c, "intermediate_size")}}};
  if (c.op == "ple_inputs") {
    return {{"per_layer_inputs", {B, S, p(c, "num_hidden_layers"), p(c, "hidden_size_per_layer_input")}}};
  }
  return {{"y", {B, S, p(c, "hidden_size")}}};  // rms_norm, mlp, moe, ple_branch
}

bool all_finite(const Tensor& t) { return torch::isfinite(t).all().item<bool>(); }

Tensor row_block(const Tensor& out, int64_t b, int64_t from, int64_t to) { return out[b].slice(0, from, to); }

TEST(OpCaseCatalogue, NamesAreUniqueShortAndFindable) {
  const std::regex pattern("[a-z0-9_]+(-[a-z0-9_]+)*");
  std::set<std::string> names;
  for (const OpCase& c : op_cases()) {
    EXPECT_TRUE(std::regex_match(c.name, pattern)) << c.name;
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate " << c.name;
    EXPECT_FALSE(c.summary.empty()) << c.name;
    EXPECT_EQ(c.summary.find('\n'), std::string::npos) << c.name;
    EXPECT_EQ(find_op_case(c.name), &c);
  }
  EXPECT_EQ(find_op_case("no-such-case"), nullptr);
}

TEST(OpCaseCatalogue, EveryCaseRunsInEveryDtypeOnCpu) {
  for (const OpCase& c : op_cases()) {
    for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
      SCOPED_TRACE(c.name + " " + c10::toString(dtype));
      const OpTensors t = make_op_tensors(c, 7, dtype, torch::kCPU);
      const OpResult r = run_case(c, t);

      const auto shapes = documented_output_shapes(c);
      ASSERT_EQ(r.outputs.size(), shapes.size());
      for (const auto& [name, shape] : shapes) {
        SCOPED_TRACE("output " + name);
        ASSERT_TRUE(r.outputs.count(name));
        const Tensor& out = r.outputs.at(name);
        EXPECT_EQ(out.sizes(), c10::IntArrayRef(shape));
        EXPECT_EQ(out.scalar_type(), dtype);
        EXPECT_FALSE(out.requires_grad());
        EXPECT_TRUE(all_finite(out));
        if (t.upstream.count(name)) EXPECT_EQ(t.upstream.at(name).sizes(), out.sizes());
      }

      std::set<std::string> floating;
      for (const auto& [name, in] : t.inputs) {
        if (in.is_floating_point()) floating.insert(name);
        EXPECT_EQ(in.is_floating_point() ? dtype : torch::kInt64, in.scalar_type()) << name;
      }
      std::set<std::string> graded;
      for (const auto& [name, g] : r.grads) {
        SCOPED_TRACE("grad " + name);
        graded.insert(name);
        ASSERT_TRUE(t.inputs.count(name));
        EXPECT_EQ(g.sizes(), t.inputs.at(name).sizes());
        EXPECT_EQ(g.scalar_type(), dtype);
        EXPECT_TRUE(all_finite(g));
        EXPECT_GT(g.to(torch::kFloat32).abs().sum().item<float>(), 0.0f);
      }
      EXPECT_EQ(graded, floating);
    }
  }
}

// Skipped without a GPU (CI); run on the GPU host. f32 must match the CPU, bf16 and f16 run finite.
TEST(OpCaseCatalogue, EveryCaseRunsOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA);
  for (const OpCase& c : op_cases()) {
    for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
      SCOPED_TRACE(c.name + " " + c10::toString(dtype));
      const OpResult gpu = run_case(c, make_op_tensors(c, 7, dtype, cuda));
      const OpResult cpu = run_case(c, make_op_tensors(c, 7, dtype, torch::kCPU));
      for (const auto* group : {&gpu.outputs, &gpu.grads}) {
        for (const auto& [name, t] : *group) {
          EXPECT_TRUE(t.is_cuda()) << name;
          EXPECT_TRUE(all_finite(t)) << name;
          const Tensor& expected = (group == &gpu.outputs ? cpu.outputs : cpu.grads).at(name);
          // fp32: the tolerance policy's bound (golden/FORMAT.md), the same one golden verify applies.
          if (dtype == torch::kFloat32) {
            const Verdict v = check_fp32(t, expected);
            EXPECT_TRUE(v.pass) << name << ": max_rel " << v.metrics.max_rel << ", cosine " << v.metrics.cosine;
          }
        }
      }
    }
  }
}

TEST(OpCaseTensors, DeterministicAndSeeded) {
  for (const OpCase& c : op_cases()) {
    SCOPED_TRACE(c.name);
    const OpTensors a = f32_tensors(c, 1), b = f32_tensors(c, 1), other = f32_tensors(c, 2);
    for (TensorMap OpTensors::*group : {&OpTensors::inputs, &OpTensors::upstream}) {
      ASSERT_EQ((a.*group).size(), (b.*group).size());
      for (const auto& [name, t] : a.*group) {
        EXPECT_TRUE(torch::equal(t, (b.*group).at(name))) << name;
        if (t.is_floating_point()) EXPECT_FALSE(torch::equal(t, (other.*group).at(name))) << name;
      }
    }
  }
}

TEST(OpCaseTensors, ReducedPrecisionIsTheFloat32ValuesRounded) {
  // golden/FORMAT.md: generated in float32, then rounded once more to the dtype.
  const OpCase& c = get_case("moe-top2");
  const OpTensors f32 = f32_tensors(c, 3);
  const OpTensors bf16 = make_op_tensors(c, 3, torch::kBFloat16, torch::kCPU);
  for (const auto& [name, t] : f32.inputs) {
    EXPECT_TRUE(torch::equal(t.to(torch::kBFloat16), bf16.inputs.at(name))) << name;
  }
}

// ---- Independent math checks ----

// Perturbs key (and value) position j of every batch row and head.
OpTensors with_perturbed_key(OpTensors t, int64_t j, int64_t batch_row = -1) {
  for (const char* name : {"k", "v"}) {
    Tensor x = t.inputs.at(name).clone();
    Tensor slot = batch_row < 0 ? x.select(2, j) : x[batch_row].select(1, j);
    slot.add_(1.0);
    t.inputs[name] = x;
  }
  return t;
}

TEST(OpCaseMath, SlidingWindowSeesExactlyTheLastWindowKeys) {
  const OpCase& c = get_case("attention-sliding-window-lt-s");
  const int64_t window = p(c, "sliding_window"), i = 10;
  ASSERT_LT(window, i);
  const OpTensors t = f32_tensors(c);
  const Tensor base = run_case(c, t).outputs.at("out");
  auto row_i = [&](const OpTensors& perturbed) { return run_case(c, perturbed).outputs.at("out").select(1, i); };
  // Query i sees keys i - window + 1 .. i.
  EXPECT_TRUE(torch::equal(row_i(with_perturbed_key(t, i - window)), base.select(1, i)));
  EXPECT_TRUE(torch::equal(row_i(with_perturbed_key(t, i + 1)), base.select(1, i)));
  EXPECT_FALSE(torch::allclose(row_i(with_perturbed_key(t, i - window + 1)), base.select(1, i)));
  EXPECT_FALSE(torch::allclose(row_i(with_perturbed_key(t, i)), base.select(1, i)));
}

TEST(OpCaseMath, WindowLongerThanSequenceIsPlainCausalAttention) {
  const OpCase& c = get_case("attention-sliding-window-gt-s");
  const OpTensors t = f32_tensors(c);
  const Tensor out = run_case(c, t).outputs.at("out");

  // softmax(q k^T + causal) v in float64, kv head j serving query heads j*g .. (j+1)*g - 1.
  const Tensor q = t.inputs.at("q").to(torch::kFloat64).transpose(1, 2);  // [B, Hq, S, D]
  const int64_t group = q.size(1) / t.inputs.at("k").size(1), S = q.size(2);
  const Tensor k = t.inputs.at("k").to(torch::kFloat64).repeat_interleave(group, 1);
  const Tensor v = t.inputs.at("v").to(torch::kFloat64).repeat_interleave(group, 1);
  const Tensor future = torch::ones({S, S}, torch::kBool).triu(1);
  const Tensor probs = torch::softmax(q.matmul(k.transpose(2, 3)).masked_fill(future, -INFINITY), -1);
  const Tensor expected = probs.matmul(v).transpose(1, 2).reshape(out.sizes());
  EXPECT_TRUE(torch::allclose(out.to(torch::kFloat64), expected, 1e-5, 1e-5));
}

TEST(OpCaseMath, PaddedKeysGetNoAttention) {
  const OpCase& c = get_case("attention-sliding-padded");
  const int64_t padded = c.params.at("left_padding")[1].get<int64_t>(), S = p(c, "seq_len");
  ASSERT_GT(padded, 1);
  const OpTensors t = f32_tensors(c);
  ASSERT_EQ(t.inputs.at("attention_mask")[1].sum().item<int64_t>(), S - padded);
  const Tensor base = run_case(c, t).outputs.at("out");

  const Tensor moved = run_case(c, with_perturbed_key(t, padded - 1, 1)).outputs.at("out");
  EXPECT_TRUE(torch::equal(row_block(moved, 1, padded, S), row_block(base, 1, padded, S)));
  EXPECT_TRUE(torch::equal(moved[0], base[0]));
  // Negative control: the first real key is seen by the first real query.
  const Tensor real = run_case(c, with_perturbed_key(t, padded, 1)).outputs.at("out");
  EXPECT_FALSE(torch::allclose(real[1][padded], base[1][padded]));
}

TEST(OpCaseMath, ProportionalRopePassesUnrotatedDimsThrough) {
  const OpCase& c = get_case("rope-proportional");
  const int64_t D = p(c, "head_dim");
  const double factor = c.params.at("rope_parameters").at("partial_rotary_factor").get<double>();
  const int64_t rotated = static_cast<int64_t>(factor * D / 2);  // GEMMA4.md, Forward 3
  ASSERT_GT(rotated, 0);
  ASSERT_LT(rotated, D / 2);
  const OpTensors t = f32_tensors(c);
  const Tensor x = t.inputs.at("x"), y = run_case(c, t).outputs.at("y");
  for (int64_t half : {int64_t{0}, D / 2}) {
    EXPECT_TRUE(torch::equal(y.slice(-1, half + rotated, half + D / 2), x.slice(-1, half + rotated, half + D / 2)));
    // Position 0 is the identity; later positions rotate the first pairs.
    const Tensor moved_y = y.slice(1, 1).slice(-1, half, half + rotated);
    EXPECT_FALSE(torch::allclose(moved_y, x.slice(1, 1).slice(-1, half, half + rotated)));
  }
}

TEST(OpCaseMath, UnscaledRmsNormHasUnitRms) {
  const OpCase& c = get_case("rms_norm-noscale");
  const Tensor y = run_case(c, f32_tensors(c)).outputs.at("y");
  const Tensor rms = y.pow(2).mean(-1).sqrt();
  EXPECT_TRUE(torch::allclose(rms, torch::ones_like(rms), 0.0, 1e-5)) << (rms - 1).abs().max().item<float>();
}

TEST(OpCaseMath, KEqVValueIsTheUnscaledNormOfTheRawKey) {
  const OpCase& c = get_case("qk_norm_rope-full-keqv");
  const OpTensors t = f32_tensors(c);
  ASSERT_FALSE(t.inputs.count("v"));
  const OpResult r = run_case(c, t);
  const Tensor k = t.inputs.at("k");
  const double eps = c.params.at("rms_norm_eps").get<double>();
  const Tensor expected = (k / (k.pow(2).mean(-1, true) + eps).sqrt()).transpose(1, 2);
  EXPECT_TRUE(torch::allclose(r.outputs.at("v"), expected, 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(r.outputs.at("k"), r.outputs.at("v")));
}

// ---- Errors ----

void expect_error(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no gemma4::Error";
  } catch (const Error& e) {
    for (const std::string& fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what() << " lacks " << fragment;
    }
  }
}

TEST(OpCaseErrors, NameTheOpAndTheTensor) {
  const OpCase& c = get_case("attention-sliding-mqa");
  const OpTensors t = f32_tensors(c);

  OpTensors missing = t;
  missing.inputs.erase("k");
  expect_error([&] { run_case(c, missing); }, {"op attention", "'k'", "missing"});

  OpTensors mis_shaped = t;
  mis_shaped.inputs["k"] = mis_shaped.inputs["k"].transpose(1, 2);
  expect_error([&] { run_case(c, mis_shaped); }, {"op attention", "'k'", "shape", "[2, 1, 16, 16]"});

  OpTensors mixed = t;
  mixed.inputs["v"] = mixed.inputs["v"].to(torch::kBFloat16);
  expect_error([&] { run_case(c, mixed); }, {"op attention", "'v'", "BFloat16"});

  OpTensors extra = t;
  extra.inputs["kv"] = t.inputs.at("k");
  expect_error([&] { run_case(c, extra); }, {"op attention", "'kv'"});

  OpTensors no_upstream = t;
  no_upstream.upstream.clear();
  expect_error([&] { run_case(c, no_upstream); }, {"op attention", "upstream 'out'", "missing"});

  expect_error([&] { run_op("softcap", c.params, t.inputs, t.upstream); }, {"softcap", "attention", "moe"});

  const OpCase& ple = get_case("ple-inputs");
  OpTensors out_of_vocab = f32_tensors(ple);
  out_of_vocab.inputs["input_ids"] = out_of_vocab.inputs["input_ids"] + p(ple, "vocab_size_per_layer_input");
  expect_error([&] { run_case(ple, out_of_vocab); }, {"op ple_inputs", "'input_ids'"});
}

}  // namespace
}  // namespace gemma4::golden
