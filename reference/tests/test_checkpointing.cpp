// Activation checkpointing gives the same loss and gradients as a plain run, including the
// gradient that reaches a storing layer through the layers that borrow its K/V, and when
// backward runs on another thread than forward.
#include <gtest/gtest.h>

#include <torch/cuda.h>

#include <iostream>
#include <thread>

#include <torch/csrc/autograd/autograd.h>

#include "reference/checkpoint.h"
#include "reference/model.h"
#include "reference/tests/test_support.h"

namespace gemma4 {
namespace {

using Grads = std::vector<std::pair<std::string, torch::Tensor>>;

struct StepResult {
  double loss;
  Grads grads;
};

StepResult train_step(const nlohmann::json& config_json, bool checkpoint, bool backward_on_other_thread,
                      torch::Device device = torch::kCPU) {
  const Config config = parse_config(config_json);
  Model model(config, random_weights(config, 5, torch::kFloat32, device));
  model.set_requires_grad(true);
  ForwardInputs in;
  in.input_ids = test::random_ids(2, 10, config.vocab_size, 9);
  in.labels = in.input_ids.clone();
  ForwardOptions options;
  if (checkpoint) options.checkpoint_layers.assign(config.num_hidden_layers, true);
  const ForwardOutputs out = model.forward(in, options);
  if (backward_on_other_thread) {
    std::thread([&] { out.loss.backward(); }).join();
  } else {
    out.loss.backward();
  }
  StepResult run{out.loss.item<double>(), {}};
  for (const auto& [name, t] : model.named_trainable_tensors()) run.grads.emplace_back(name, t.grad().cpu());
  return run;
}

void expect_same(const StepResult& a, const StepResult& b) {
  EXPECT_DOUBLE_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    SCOPED_TRACE(a.grads[i].first);
    ASSERT_TRUE(a.grads[i].second.defined());
    ASSERT_TRUE(b.grads[i].second.defined());
    // Recompute repeats the same kernels on the same data: equal up to reduction order.
    EXPECT_TRUE(torch::allclose(a.grads[i].second, b.grads[i].second, 1e-5, 1e-7));
  }
}

TEST(Checkpointing, SharedKvSameLossAndGrads) {
  const StepResult plain = train_step(test::tiny_shared_kv_config(), false, false);
  const StepResult checkpointed = train_step(test::tiny_shared_kv_config(), true, false);
  expect_same(plain, checkpointed);
  // The storing layers' k_proj get gradient only through the shared layers downstream of them
  // and through their own attention; it must not be zero.
  for (const auto& [name, g] : checkpointed.grads) {
    if (name == "model.layers.1.self_attn.k_proj.weight" || name == "model.layers.2.self_attn.k_proj.weight") {
      EXPECT_GT(g.abs().max().item<double>(), 0.0) << name;
    }
  }
}

TEST(Checkpointing, MoeSameLossAndGrads) {
  expect_same(train_step(test::tiny_moe_config(), false, false), train_step(test::tiny_moe_config(), true, false));
}

TEST(Checkpointing, BackwardOnAnotherThread) {
  expect_same(train_step(test::tiny_shared_kv_config(), false, false),
              train_step(test::tiny_shared_kv_config(), true, true));
}

// On CUDA the autograd engine runs backward, and so the recompute, on its device thread.
TEST(Checkpointing, CudaSameLossAndGrads) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA, 0);
  expect_same(train_step(test::tiny_shared_kv_config(), false, false, cuda),
              train_step(test::tiny_shared_kv_config(), true, false, cuda));
}

TEST(Checkpoint, RecomputeThread) {
  for (bool cuda : {false, true}) {
    if (cuda && !torch::cuda::is_available()) continue;
    SCOPED_TRACE(cuda ? "cuda" : "cpu");
    const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    std::vector<std::thread::id> threads;  // one entry per call: forward, then recompute
    auto fn = [&threads](const std::vector<torch::Tensor>& in) {
      threads.push_back(std::this_thread::get_id());
      return std::vector<torch::Tensor>{in[0] * in[0]};
    };
    const torch::Tensor x = torch::randn({4}, device).requires_grad_(true);
    checkpoint(fn, {x}, {})[0].sum().backward();
    ASSERT_EQ(threads.size(), 2u);
    EXPECT_TRUE(torch::allclose(x.grad(), 2 * x.detach()));
    // CPU backward runs on the calling thread; CUDA backward on the engine's device thread.
    EXPECT_EQ(threads[1] == std::this_thread::get_id(), !cuda);
    std::cout << (cuda ? "cuda" : "cpu") << ": recompute on " << (threads[1] == threads[0] ? "the forward thread" : "another thread")
              << "\n";
  }
}

// checkpoint() on its own: gradients reach inputs and the parameters listed, undefined tensors
// pass through, and a parameter left out of the list gets no gradient (the failure the model
// would have if a layer's weights were not routed).
TEST(Checkpoint, RoutesGradientToInputsAndListedParams) {
  const torch::Tensor x = torch::randn({3, 4}).requires_grad_(true);
  const torch::Tensor w = torch::randn({4, 4}).requires_grad_(true);
  const torch::Tensor b = torch::randn({4}).requires_grad_(true);
  auto fn = [w, b](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{torch::tanh(torch::matmul(in[0], w) + b), torch::Tensor(), in[0] * 2};
  };
  const auto plain = fn({x});
  const torch::Tensor plain_loss = plain[0].sum() + plain[2].pow(2).sum();
  const auto grads = torch::autograd::grad({plain_loss}, {x, w, b});

  const auto out = checkpoint(fn, {x, torch::Tensor()}, {w, b});
  EXPECT_FALSE(out[1].defined());
  (out[0].sum() + out[2].pow(2).sum()).backward();
  EXPECT_TRUE(torch::allclose(x.grad(), grads[0]));
  EXPECT_TRUE(torch::allclose(w.grad(), grads[1]));
  EXPECT_TRUE(torch::allclose(b.grad(), grads[2]));

  const torch::Tensor w2 = w.detach().clone().requires_grad_(true);
  const torch::Tensor b2 = b.detach().clone().requires_grad_(true);
  auto fn2 = [w2, b2](const std::vector<torch::Tensor>& in) {
    return std::vector<torch::Tensor>{torch::tanh(torch::matmul(in[0], w2) + b2)};
  };
  checkpoint(fn2, {x.detach().requires_grad_(true)}, {w2})[0].sum().backward();
  EXPECT_TRUE(w2.grad().defined());
  EXPECT_FALSE(b2.grad().defined());
}

// A second backward through a checkpoint whose saved inputs were released is refused by name,
// not re-run on an empty input list.
TEST(Checkpoint, BackwardTwiceIsRefused) {
  const torch::Tensor x = torch::randn({3}).requires_grad_(true);
  auto fn = [](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{in.at(0) * in.at(0)}; };
  const torch::Tensor loss = checkpoint(fn, {x}, {})[0].sum();
  loss.backward();
  try {
    loss.backward();
    ADD_FAILURE() << "second backward accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("backward twice"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, NoGraphWhenNothingNeedsGrad) {
  const torch::Tensor x = torch::randn({2});
  auto fn = [](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{in[0] * 3}; };
  EXPECT_FALSE(checkpoint(fn, {x}, {})[0].requires_grad());
}

}  // namespace
}  // namespace gemma4
