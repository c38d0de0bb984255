// Each faulty backend's bug is real (it changes what the reference computes, or fails as the real
// bug did), and the reference backend, run the same way, is right.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <thread>

#include "impl/backend.h"
#include "impl/faulty/faulty_backends.h"
#include "reference/error.h"
#include "reference/model.h"
#include "reference/tests/test_support.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;
using Grads = std::vector<std::pair<std::string, Tensor>>;

const Backend& backend(const std::string& name) {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> b = faulty_backends();
    b.push_back(find_backend("reference"));
    return b;
  }();
  for (const Backend& b : all) {
    if (b.name == name) return b;
  }
  throw Error("no backend " + name);
}

ForwardOptions options(const Backend& b, bool checkpoint, const Config& config) {
  ForwardOptions o;
  o.ops = &b.ops;
  o.kv_handoff = b.kv_handoff ? &b.kv_handoff : nullptr;
  if (checkpoint) o.checkpoint_layers.assign(config.num_hidden_layers, true);
  return o;
}

Model make_model(const Config& config, uint64_t seed, torch::Device device = torch::kCPU) {
  Model model(config, random_weights(config, seed, torch::kFloat32, device));
  model.set_requires_grad(true);
  return model;
}

ForwardInputs inputs(const Config& config) {
  ForwardInputs in;
  in.input_ids = test::random_ids(2, 10, config.vocab_size, 9);
  in.labels = in.input_ids.clone();
  return in;
}

Grads grads(const Model& model) {
  Grads g;
  for (const auto& [name, t] : model.named_trainable_tensors())
    g.emplace_back(name, t.grad().defined() ? t.grad().cpu() : t.grad());
  return g;
}

// One training step of a fresh model (weights from `seed`).
Grads train(const Backend& b, bool checkpoint, uint64_t seed = 5, torch::Device device = torch::kCPU) {
  const Config config = parse_config(test::tiny_shared_kv_config());
  const Model model = make_model(config, seed, device);
  model.forward(inputs(config), options(b, checkpoint, config)).loss.backward();
  return grads(model);
}

// Equal up to reduction order, as the reference's checkpointing test allows.
bool same(const Grads& a, const Grads& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor& x = a[i].second;
    const Tensor& y = b[i].second;
    if (x.defined() != y.defined()) return false;
    if (x.defined() && !torch::allclose(x, y, 1e-5, 1e-7)) return false;
  }
  return true;
}

Tensor grad_of(const Grads& g, const std::string& name) {
  for (const auto& [n, t] : g) {
    if (n == name) return t;
  }
  throw Error("no gradient " + name);
}

// --- Op-level bugs: the logits differ from the reference backend's, which equal the plain model's.

Tensor logits(const nlohmann::json& config_json, const Backend* b) {
  const Config config = parse_config(config_json);
  const Model model(config, random_weights(config, 5, torch::kFloat32, torch::kCPU));
  torch::NoGradGuard no_grad;
  ForwardOptions o = b ? options(*b, false, config) : ForwardOptions{};
  return model.forward(inputs(config), o).logits;
}

// tiny_shared_kv_config with global layers of head dim 512, as the released models have.
nlohmann::json global_head_dim_512_config() {
  nlohmann::json j = test::tiny_shared_kv_config();
  j["global_head_dim"] = 512;
  return j;
}

void expect_op_bug(const std::string& name, const nlohmann::json& config_json) {
  SCOPED_TRACE(name);
  const Tensor plain = logits(config_json, nullptr);
  EXPECT_TRUE(torch::equal(logits(config_json, &backend("reference")), plain));
  const Tensor faulty = logits(config_json, &backend(name));
  EXPECT_FALSE(torch::allclose(faulty, plain, 1e-3, 1e-3)) << "max abs diff " << test::max_abs_diff(faulty, plain);
}

TEST(FaultyBackends, NamesAndDescriptions) {
  const std::vector<Backend> all = faulty_backends();
  // 11 GEMMA4.md failure modes and the global layers windowed, 10 numeric bug classes, 5 decoding bugs of engines, 5 of wrapped
  // caches (and the sink lost once one wraps), 3 of fp8 KV caches, 2 that only long rows show, 7 of
  // the steps around the layers and of masking, 2 bf16 accumulators
  ASSERT_EQ(all.size(), 47u);
  for (const Backend& b : all) {
    EXPECT_EQ(b.name.rfind("faulty-", 0), 0u) << b.name;
    EXPECT_FALSE(b.description.empty()) << b.name;
    EXPECT_TRUE(b.capabilities.deterministic) << b.name;
    EXPECT_EQ(b.kind, BackendKind::kFaulty) << b.name;
    EXPECT_FALSE(b.fails_in.empty()) << b.name;
  }
  // Each numeric bug names where it was reported.
  for (const Backend& b : faulty_numeric_backends()) EXPECT_NE(b.description.find("(https://github.com/"), std::string::npos) << b.name;
  // So does each bug of a wrapped cache: "(owner/repo #N...)".
  for (const Backend& b : faulty_cache_backends()) EXPECT_NE(b.description.find(" #"), std::string::npos) << b.name;
  // And each bf16 accumulator.
  for (const Backend& b : faulty_accumulator_backends()) EXPECT_NE(b.description.find(" #"), std::string::npos) << b.name;
}

TEST(FaultyBackends, NoWindow) { expect_op_bug("faulty-no-window", test::tiny_shared_kv_config()); }
TEST(FaultyBackends, WindowOffByOne) { expect_op_bug("faulty-window-off-by-one", test::tiny_shared_kv_config()); }
TEST(FaultyBackends, OnePlusWNorm) { expect_op_bug("faulty-one-plus-w-norm", test::tiny_shared_kv_config()); }

TEST(FaultyBackends, HeadDim256Kernel) {
  expect_op_bug("faulty-head-dim-256-kernel", global_head_dim_512_config());
  // Within its limit the kernel is right.
  EXPECT_TRUE(torch::equal(logits(test::tiny_shared_kv_config(), &backend("faulty-head-dim-256-kernel")),
                           logits(test::tiny_shared_kv_config(), nullptr)));
}

// The forward is right; the norm scales get no gradient.
TEST(FaultyBackends, NormNoWeightGrad) {
  const nlohmann::json config_json = test::tiny_shared_kv_config();
  EXPECT_TRUE(torch::equal(logits(config_json, &backend("faulty-norm-no-weight-grad")), logits(config_json, nullptr)));
  const Config config = parse_config(config_json);
  const Model model = make_model(config, 5);
  const ForwardOptions o = options(backend("faulty-norm-no-weight-grad"), false, config);
  model.forward(inputs(config), o).loss.backward();
  const torch::Tensor& scale = model.weights().layers[0].input_layernorm;
  EXPECT_TRUE(!scale.grad().defined() || scale.grad().abs().max().item<double>() == 0.0);
  EXPECT_GT(model.weights().layers[0].mlp.up_proj.grad().abs().max().item<double>(), 0.0);
}

// The attention op itself is run-dependent: two identical calls differ in the last bits of the
// output and of dQ, dK and dV (fp32), where the reference's are bitwise equal.
TEST(FaultyBackends, NondeterministicAttentionOp) {
  const Tensor q = torch::rand({2, 9, 4, 8}), k = torch::rand({2, 2, 9, 8}), v = torch::rand({2, 2, 9, 8});
  const Tensor upstream = torch::rand({2, 9, 32});
  const AttentionSpec spec{LayerType::kSliding, 4, false, Tensor()};
  auto run = [&](const Backend& b) {
    const Tensor lq = q.clone().requires_grad_(), lk = k.clone().requires_grad_(), lv = v.clone().requires_grad_();
    const Tensor out = b.ops.attention(lq, lk, lv, spec);
    out.backward(upstream);
    return std::vector<Tensor>{out.detach(), lq.grad(), lk.grad(), lv.grad()};
  };
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (const char* name : {"reference", "faulty-nondeterministic-attention"}) {
    SCOPED_TRACE(name);
    const std::vector<Tensor> first = run(backend(name)), second = run(backend(name));
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(torch::equal(first[i], second[i]), std::string(name) == "reference") << names[i];
      // Only the last bits: within 1e-5 of the tensor's scale.
      EXPECT_LE(test::max_abs_diff(first[i], second[i]), 1e-5 * first[i].abs().max().item<double>()) << names[i];
    }
  }
}

// --- Hand-off bugs.

// Over 5 checkpointed training steps the K/V the storing layers hand over stay alive with the
// faulty backend (more every step); with the reference none survives its step. Measured through
// weak references to the K/V's storage, so any holder counts.
std::vector<int64_t> live_kv_bytes_per_step(const Backend& b) {
  const Config config = parse_config(test::tiny_shared_kv_config());
  const Model model = make_model(config, 5);
  ForwardOptions o = options(b, true, config);
  o.keep_layer_outputs = true;  // exposes the stored K/V
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> stored;
  std::vector<int64_t> live_bytes;
  for (int step = 0; step < 5; ++step) {
    {
      const ForwardOutputs out = model.forward(inputs(config), o);
      out.loss.backward();
      for (const auto& [layer, kv] : out.stored_kv) {
        stored.push_back(kv.first.storage().getWeakStorageImpl());
        stored.push_back(kv.second.storage().getWeakStorageImpl());
      }
    }
    int64_t bytes = 0;
    for (const auto& weak : stored) {
      if (const auto alive = weak.lock()) bytes += static_cast<int64_t>(alive->nbytes());
    }
    live_bytes.push_back(bytes);
  }
  return live_bytes;
}

TEST(FaultyBackends, CheckpointClosureGrowsEveryStep) {
  for (int64_t bytes : live_kv_bytes_per_step(backend("reference"))) EXPECT_EQ(bytes, 0);
  const std::vector<int64_t> faulty = live_kv_bytes_per_step(backend("faulty-checkpoint-closure"));
  EXPECT_GT(faulty[0], 0);
  for (size_t i = 1; i < faulty.size(); ++i) EXPECT_GT(faulty[i], faulty[i - 1]) << "step " << i;
  // The numerics stay right.
  EXPECT_TRUE(same(train(backend("faulty-checkpoint-closure"), true), train(backend("reference"), false)));
}

TEST(FaultyBackends, ThreadLocalKvFailsInRecomputeOnAnotherThread) {
  const Grads right = train(backend("reference"), false);
  const Backend& faulty = backend("faulty-thread-local-kv");
  // Right while everything runs on one thread, checkpointed or not.
  EXPECT_TRUE(same(train(faulty, false), right));
  EXPECT_TRUE(same(train(faulty, true), right));

  const Config config = parse_config(test::tiny_shared_kv_config());
  for (const Backend* b : {&faulty, &backend("reference")}) {
    SCOPED_TRACE(b->name);
    const Model model = make_model(config, 5);
    const ForwardOutputs out = model.forward(inputs(config), options(*b, true, config));
    std::string error;
    std::thread([&] {
      try {
        out.loss.backward();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }).join();
    if (b == &faulty) {
      // Backward reaches the last layer, a full one, first.
      EXPECT_NE(error.find("faulty-thread-local-kv: no shared K/V for key 'full_attention' on this thread"),
                std::string::npos)
          << error;
    } else {
      EXPECT_EQ(error, "");
      EXPECT_TRUE(same(grads(model), right));
    }
  }
}

// Two models (different weights) train at once: both forwards, then both backwards.
std::pair<Grads, Grads> train_two_at_once(const Backend& b) {
  const Config config = parse_config(test::tiny_shared_kv_config());
  const Model first = make_model(config, 5), second = make_model(config, 6);
  const ForwardOutputs out1 = first.forward(inputs(config), options(b, true, config));
  const ForwardOutputs out2 = second.forward(inputs(config), options(b, true, config));
  out1.loss.backward();
  out2.loss.backward();
  return {grads(first), grads(second)};
}

TEST(FaultyBackends, ProcessWideKvMixesTwoModels) {
  const Grads first = train(backend("reference"), false, 5), second = train(backend("reference"), false, 6);
  const Backend& faulty = backend("faulty-process-wide-kv");
  // One model alone is right, checkpointed or not.
  EXPECT_TRUE(same(train(faulty, false, 5), first));
  EXPECT_TRUE(same(train(faulty, true, 5), first));

  const auto [ref1, ref2] = train_two_at_once(backend("reference"));
  EXPECT_TRUE(same(ref1, first));
  EXPECT_TRUE(same(ref2, second));
  const auto [bad1, bad2] = train_two_at_once(faulty);
  EXPECT_FALSE(same(bad1, first) && same(bad2, second));
}

TEST(FaultyBackends, DetachedRecomputeLosesSourceGradient) {
  const Backend& faulty = backend("faulty-detached-recompute");
  const Grads right = train(backend("reference"), false);
  EXPECT_TRUE(same(train(backend("reference"), true), right));
  EXPECT_TRUE(same(train(faulty, false), right));
  const Grads checkpointed = train(faulty, true);
  for (const char* name : {"model.layers.1.self_attn.k_proj.weight", "model.layers.2.self_attn.k_proj.weight"}) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(torch::allclose(grad_of(checkpointed, name), grad_of(right, name), 1e-3, 1e-5));
  }
}

TEST(FaultyBackends, KvKeyMismatchMissesTheRendezvous) {
  const Config config = parse_config(test::tiny_shared_kv_config());
  const Model model = make_model(config, 5);
  for (KvKeyConvention convention : {KvKeyConvention::kLayerType, KvKeyConvention::kLayerIndex}) {
    SCOPED_TRACE(kv_key_convention_name(convention));
    ForwardOptions o = options(backend("reference"), false, config);
    o.kv_key = convention;
    EXPECT_NO_THROW(model.forward(inputs(config), o));
    o = options(backend("faulty-kv-key-mismatch"), false, config);
    o.kv_key = convention;
    try {
      model.forward(inputs(config), o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      // Layer 3, the first borrowing layer, reads the index of its source, layer 1.
      EXPECT_NE(std::string(e.what()).find("layer 3 reads shared K/V under key '1'"), std::string::npos) << e.what();
    }
  }
}

// On CUDA the autograd engine runs backward, and so every checkpoint recompute, on its device
// thread: the thread-local side channel fails without any thread of ours, and the recompute is
// recognised there too.
TEST(FaultyBackends, CudaRecomputeOnDeviceThread) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  const Grads right = train(backend("reference"), false, 5, cuda);
  EXPECT_TRUE(same(train(backend("reference"), true, 5, cuda), right));
  try {
    train(backend("faulty-thread-local-kv"), true, 5, cuda);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("faulty-thread-local-kv: no shared K/V for key"), std::string::npos)
        << e.what();
  }
  const Grads detached = train(backend("faulty-detached-recompute"), true, 5, cuda);
  const std::string k_proj = "model.layers.1.self_attn.k_proj.weight";
  EXPECT_FALSE(torch::allclose(grad_of(detached, k_proj), grad_of(right, k_proj), 1e-3, 1e-5));
}

}  // namespace
}  // namespace gemma4::impl
