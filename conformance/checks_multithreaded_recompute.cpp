// multithreaded_recompute: activation checkpointing re-runs a layer in backward on whichever
// thread autograd uses, and two models may train at once. GEMMA4.md, "Known failure modes":
//  - a thread-local side channel for the shared K/V is invisible to the thread that runs the
//    recompute (CUDA: autograd's device thread; CPU: the thread that calls backward), so the
//    KV-shared layer finds nothing and fails;
//  - a process-wide side channel is shared by two models training at once: one reads the other's
//    K/V in its recompute;
//  - a recompute that detaches the borrowed K/V loses the storing layers' gradient through the
//    layers that borrow them.
// Checks (tiny E2B and E4B, the models with KV sharing):
//  - cpu-backward-thread/<model> (CPU) or device-thread/<model> (CUDA): every layer checkpointed,
//    forward on the calling thread, backward on another thread (CPU: a std::thread; CUDA: the
//    plain backward call, whose recompute runs on autograd's device thread). The hand-off is
//    observed (delegating to the backend's) to report on which thread the shared layers recomputed.
//  - two-models/<model>: two models (different seeds) train at once in two threads with
//    checkpointing; both forwards finish (a barrier) before either backward starts, so that a
//    shared store is deterministically overwritten between a forward and its recompute.
// Each result (loss, logits, every gradient) must equal the same model's single-threaded,
// non-checkpointed run on the calling thread:
//  - fp32: golden::check_fp32 (max_abs <= 1e-4 max|plain|, cosine >= 0.99999; the plain run plays
//    the golden). Checkpointing re-runs the same ops on the same inputs, so the honest error is
//    ~0; every bug above is O(1).
//  - bf16/f16: the FlashAttention rule of golden/tolerance.h, with the plain run in the suite's
//    dtype as the eager baseline and the plain run in fp32 (same weights, upcast) as the truth:
//    the checkpointed run must be no worse than k x the plain run's own rounding error (k = 2
//    forward, 3 gradients) + u max|truth|. An honest recompute is (nearly) bitwise the baseline;
//    a lost or foreign K/V gradient is far above rounding error.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/types.h>

#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "conformance/check.h"
#include "conformance/compare.h"
#include "conformance/tiny_models.h"
#include "golden/model_cases.h"
#include "reference/error.h"

namespace gemma4::conformance {
namespace {

using golden::TensorMap;
using torch::Tensor;

const std::vector<std::string> kModels = {"e2b", "e4b"};  // the tiny models with KV sharing

// One training step split at the forward/backward boundary, so that forward and backward can run
// on different threads (run_model does both on the calling thread).
struct Step {
  Config config;
  ModelWeights weights;  // fresh leaves sharing the caller's storage: the gradients land here
  std::unique_ptr<Model> model;
  ForwardInputs inputs;
  ForwardOutputs out;

  Step(const Config& c, const ModelWeights& w, const TensorMap& in)
      : config(c), weights(fresh_leaves(c, w)), model(std::make_unique<Model>(config, weights)),
        inputs(golden::forward_inputs(in, model->device())) {}

  void forward(const ForwardOptions& options) {
    torch::AutoGradMode grad_mode(true);  // grad mode is thread-local: a new thread starts enabled, say it anyway
    out = model->forward(inputs, options);
  }

  // Backward on the calling thread; the loss, logits and every trainable gradient.
  TensorMap backward() {
    torch::AutoGradMode grad_mode(true);
    out.loss.backward();
    TensorMap r{{"outputs/loss", out.loss.detach()}, {"outputs/logits", out.logits.detach()}};
    out = {};  // release the graph
    for (const WeightSlot& slot : weight_slots(config, weights)) {
      if (!slot.trainable || !slot.tensor->defined()) continue;
      r["grads/" + slot.name] = slot.tensor->grad().defined() ? slot.tensor->grad() : at::zeros_like(*slot.tensor);
    }
    return r;
  }
};

// The single-threaded, non-checkpointed run every threaded run is compared with, and in bf16/f16
// its fp32 truth.
TensorMap plain_run(const SuiteOptions& o, const Config& c, const ModelWeights& w, const TensorMap& inputs) {
  return training_step(c, w, inputs, backend_forward(o, c, /*checkpoint=*/false));
}
TensorMap fp32_truth(const SuiteOptions& o, const Config& c, const ModelWeights& w, const TensorMap& inputs) {
  return o.dtype == torch::kFloat32 ? TensorMap{} : fp32_training_step(c, w, inputs, backend_forward(o, c, false));
}

// Which threads ran the KV-shared layers: a hand-off that delegates everything to the backend's
// and adds an in-layer step (identity, or the backend's own) that notes the thread. Inside the
// autograd engine (a graph task is current) the call is a checkpoint recompute.
struct ThreadLog {
  std::mutex mutex;
  std::thread::id forward_thread;
  int forward_calls = 0, recomputes = 0, recomputes_on_forward_thread = 0;
};

class ObservedHandoff : public KvHandoff {
 public:
  ObservedHandoff(std::unique_ptr<KvHandoff> base, std::shared_ptr<ThreadLog> log)
      : base_(std::move(base)), log_(std::move(log)) {}
  void store(int layer, const std::string& key, const SharedKv& kv) override { base_->store(layer, key, kv); }
  SharedKv inputs_for(int layer, const std::string& key) override { return base_->inputs_for(layer, key); }
  InLayer in_layer(int layer, const std::string& key) override {
    return [inner = base_->in_layer(layer, key), log = log_](const SharedKv& inputs) {
      {
        std::lock_guard<std::mutex> lock(log->mutex);
        if (torch::autograd::get_current_graph_task_id() == -1) {
          ++log->forward_calls;
          log->forward_thread = std::this_thread::get_id();
        } else {
          ++log->recomputes;
          if (std::this_thread::get_id() == log->forward_thread) ++log->recomputes_on_forward_thread;
        }
      }
      return inner ? inner(inputs) : inputs;
    };
  }

 private:
  std::unique_ptr<KvHandoff> base_;
  std::shared_ptr<ThreadLog> log_;
};

int shared_layers(const Config& c) {
  int n = 0;
  for (const LayerSpec& s : c.layers) n += s.kv_shared;
  return n;
}

void check_backward_thread(const std::string& name, const SuiteOptions& o, Reporter& r) {
  const TinyModel m = tiny_model(name, o);
  const std::string why = unsupported(o, m.config);
  if (!why.empty()) return r.not_supported(why);
  const TensorMap plain = plain_run(o, m.config, m.weights, m.inputs);
  const TensorMap truth = fp32_truth(o, m.config, m.weights, m.inputs);

  auto log = std::make_shared<ThreadLog>();
  const KvHandoffFactory* backend = o.backend.kv_handoff ? &o.backend.kv_handoff : nullptr;
  const KvHandoffFactory observed = [backend, log](const Config& c) -> std::unique_ptr<KvHandoff> {
    return std::make_unique<ObservedHandoff>(backend ? (*backend)(c) : local_kv_handoff(c), log);
  };
  ForwardOptions f = backend_forward(o, m.config, /*checkpoint=*/true);
  f.kv_handoff = &observed;

  Step step(m.config, m.weights, m.inputs);
  step.forward(f);  // on this thread
  TensorMap result;
  std::exception_ptr error;
  if (o.device.is_cuda()) {
    // The CUDA engine runs the recompute on its device thread whichever thread calls backward.
    try {
      result = step.backward();
    } catch (...) {
      error = std::current_exception();
    }
  } else {
    std::thread worker([&] {
      try {
        result = step.backward();
      } catch (...) {
        error = std::current_exception();
      }
    });
    worker.join();
  }
  {
    std::lock_guard<std::mutex> lock(log->mutex);
    const int expected = shared_layers(m.config);
    const int off_thread = log->recomputes - log->recomputes_on_forward_thread;
    // A count of faults (0 passes): KV-shared recomputes missing from, or run on, the forward thread.
    const int wrong = std::abs(expected - off_thread) + log->recomputes_on_forward_thread;
    r.record("recompute thread", "misplaced_shared_layer_recomputes", wrong, 0, wrong == 0,
             std::to_string(log->recomputes) + " recomputes of the " + std::to_string(expected) +
                 " KV-shared layers, " + std::to_string(log->recomputes_on_forward_thread) +
                 " on the forward thread" + (o.device.is_cuda() ? " (CUDA device thread expected)" : ""));
  }
  if (error) return r.fail("backward", "backward on another thread threw: " + error_message(error));
  record_comparison(r, "", result, plain, truth, golden::model_judged(m.inputs, plain), o.dtype, /*bitwise=*/false);
}

// A barrier for a fixed number of threads (std::barrier is C++20).
class Barrier {
 public:
  explicit Barrier(int n) : left_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (--left_ == 0) return cv_.notify_all();
    cv_.wait(lock, [this] { return left_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int left_;
};

void check_two_models(const std::string& name, const SuiteOptions& o, Reporter& r) {
  // Different weights (seeds 11 and 23), the same input shapes: a K/V taken from the other model
  // fits and runs, and only the numbers betray it.
  const TinyModel a = tiny_model(name, o, 11), b = tiny_model(name, o, 23);
  const std::string why = unsupported(o, a.config);
  if (!why.empty()) return r.not_supported(why);
  const TinyModel* models[2] = {&a, &b};
  TensorMap plain[2], truth[2];
  for (int i = 0; i < 2; ++i) {
    plain[i] = plain_run(o, models[i]->config, models[i]->weights, models[i]->inputs);
    truth[i] = fp32_truth(o, models[i]->config, models[i]->weights, models[i]->inputs);
  }

  const ForwardOptions f = backend_forward(o, a.config, /*checkpoint=*/true);
  Barrier forwards_done(2);
  TensorMap result[2];
  std::exception_ptr error[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<Step> step;
      try {
        step = std::make_unique<Step>(models[i]->config, models[i]->weights, models[i]->inputs);
        step->forward(f);
      } catch (...) {
        error[i] = std::current_exception();
      }
      forwards_done.arrive_and_wait();  // also on failure, or the other thread waits forever
      if (error[i]) return;
      try {
        result[i] = step->backward();
      } catch (...) {
        error[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 2; ++i) {
    const std::string label = std::string(i == 0 ? "model A (seed 11)" : "model B (seed 23)") + ": ";
    if (error[i]) {
      r.fail(label + "training", "threw: " + error_message(error[i]));
      continue;
    }
    record_comparison(r, label, result[i], plain[i], truth[i], golden::model_judged(models[i]->inputs, plain[i]), o.dtype,
                      /*bitwise=*/false);
  }
}

}  // namespace

std::vector<Check> multithreaded_recompute_checks(const SuiteOptions& o) {
  std::vector<Check> checks;
  const std::string thread_check = o.device.is_cuda() ? "device-thread/" : "cpu-backward-thread/";
  for (const std::string& name : kModels) {
    checks.push_back({Category::kMultithreadedRecompute, thread_check + name,
                      [name](const SuiteOptions& o, Reporter& r) { check_backward_thread(name, o, r); }});
  }
  for (const std::string& name : kModels) {
    checks.push_back({Category::kMultithreadedRecompute, "two-models/" + name,
                      [name](const SuiteOptions& o, Reporter& r) { check_two_models(name, o, r); }});
  }
  return checks;
}

}  // namespace gemma4::conformance
