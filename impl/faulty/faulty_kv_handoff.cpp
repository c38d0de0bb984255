// The shared-KV hand-off bugs (GEMMA4.md, "KV sharing" and "Known failure modes"). Each wraps the
// reference hand-off (local_kv_handoff: a map local to one forward call whose K/V reach the
// borrowing layers as tensor inputs) and changes one thing: where the borrowing layer finds its
// K/V, what a checkpoint recompute does with them, or which key the store uses.
#include <torch/csrc/autograd/graph_task.h>

#include <map>
#include <mutex>

#include "impl/faulty/faulty_backends.h"
#include "reference/error.h"
#include "reference/kv_sharing.h"

namespace gemma4::impl {
namespace {

using torch::Tensor;

// The K/V a borrowing layer reads from a side channel, with the gradient routed to the K/V that
// arrived as its inputs. That is how the real trainers saw it under PyTorch's non-reentrant
// checkpoint: the gradient reaches the tensors the forward used, while the recompute reads
// whatever the side channel holds then. (Under the reference's reentrant checkpoint, a side
// channel read alone would also lose that gradient, a different bug.) x + (s - x).detach() is
// bitwise x when s holds x's (finite) values, so a side channel that holds the right K/V changes nothing.
SharedKv read_through(const SharedKv& inputs, const SharedKv& side) {
  auto through = [](const Tensor& x, const Tensor& s) { return x + (s - x).detach(); };
  return {through(inputs.k, side.k), through(inputs.v, side.v)};
}

// The reference hand-off, each of whose methods a faulty hand-off may override.
class WrappedHandoff : public KvHandoff {
 public:
  explicit WrappedHandoff(const Config& config) : base_(local_kv_handoff(config)) {}
  void store(int layer, const std::string& key, const SharedKv& kv) override { base_->store(layer, key, kv); }
  SharedKv inputs_for(int layer, const std::string& key) override { return base_->inputs_for(layer, key); }

 private:
  std::unique_ptr<KvHandoff> base_;
};

// faulty-checkpoint-closure. Every K/V ever stored, owned by the backend and never cleared; the
// mutex only keeps concurrent forwards from corrupting it.
struct KvHistory {
  std::mutex mutex;
  std::vector<SharedKv> kv;
};

// The store also appends to a container that outlives the step, and the in-layer closure (which
// the checkpoint keeps until backward) captures that container to read this step's entry. Reads
// are right; nothing is ever released: memory grows every step (GEMMA4.md, Known failure modes:
// +0.47 GiB/step, OOM at step 73 on 31B).
class CapturedContainerHandoff : public WrappedHandoff {
 public:
  CapturedContainerHandoff(const Config& config, std::shared_ptr<KvHistory> history)
      : WrappedHandoff(config), history_(std::move(history)) {}

  void store(int layer, const std::string& key, const SharedKv& kv) override {
    WrappedHandoff::store(layer, key, kv);
    std::lock_guard<std::mutex> lock(history_->mutex);
    entry_[key] = history_->kv.size();
    history_->kv.push_back(kv);
  }

  InLayer in_layer(int, const std::string& key) override {
    return [history = history_, entry = entry_.at(key)](const SharedKv& inputs) {
      std::lock_guard<std::mutex> lock(history->mutex);
      return read_through(inputs, history->kv.at(entry));
    };
  }

 private:
  std::shared_ptr<KvHistory> history_;
  std::map<std::string, size_t> entry_;  // this call's entry per key
};

// faulty-thread-local-kv. The storing layer also puts its K/V in a thread-local map, and the
// borrowing layer reads them from there on the thread that runs it. Right as long as forward and
// recompute share a thread; a checkpoint recompute on the autograd worker thread (CUDA's device
// thread, or a CPU backward started on another thread) finds the map empty and fails
// (GEMMA4.md, Known failure modes).
thread_local std::map<std::string, SharedKv> thread_kv;

class ThreadLocalHandoff : public WrappedHandoff {
 public:
  using WrappedHandoff::WrappedHandoff;

  void store(int layer, const std::string& key, const SharedKv& kv) override {
    WrappedHandoff::store(layer, key, kv);
    thread_kv[key] = kv;
  }

  InLayer in_layer(int, const std::string& key) override {
    return [key](const SharedKv& inputs) {
      const auto it = thread_kv.find(key);
      if (it == thread_kv.end()) {
        throw Error("faulty-thread-local-kv: no shared K/V for key '" + key + "' on this thread");
      }
      return read_through(inputs, it->second);
    };
  }
};

// faulty-process-wide-kv. One store for the whole process, read at (re)compute time: visible on
// every thread, but shared by every model, so two models that train at once read each other's
// K/V when one's forward runs between the other's forward and its backward recompute (GEMMA4.md,
// Known failure modes). Never destroyed, so that no tensor outlives the CUDA runtime at exit.
struct ProcessWideKv {
  std::mutex mutex;
  std::map<std::string, SharedKv> kv;
};
ProcessWideKv& process_kv() {
  static ProcessWideKv* store = new ProcessWideKv;
  return *store;
}

class ProcessWideHandoff : public WrappedHandoff {
 public:
  using WrappedHandoff::WrappedHandoff;

  void store(int layer, const std::string& key, const SharedKv& kv) override {
    WrappedHandoff::store(layer, key, kv);
    std::lock_guard<std::mutex> lock(process_kv().mutex);
    process_kv().kv[key] = kv;
  }

  InLayer in_layer(int, const std::string& key) override {
    return [key](const SharedKv& inputs) {
      std::lock_guard<std::mutex> lock(process_kv().mutex);
      return read_through(inputs, process_kv().kv.at(key));  // the store always precedes the read
    };
  }
};

// faulty-detached-recompute. The borrowing layer detaches its K/V when it runs inside backward
// (a checkpoint recompute): the storing layers then get no gradient through the layers that
// borrow from them. The forward, and training without checkpointing, are right.
// get_current_graph_task_id() is -1 outside the autograd engine: the forward runs there (with or
// without grad), a checkpoint recompute never does.
class DetachedRecomputeHandoff : public WrappedHandoff {
 public:
  using WrappedHandoff::WrappedHandoff;

  InLayer in_layer(int, const std::string&) override {
    return [](const SharedKv& inputs) {
      if (torch::autograd::get_current_graph_task_id() == -1) return inputs;
      return SharedKv{inputs.k.detach(), inputs.v.detach()};
    };
  }
};

// faulty-kv-key-mismatch. The store keys by layer type (transformers >= 5.8) while the reads key
// by source layer index (<= 5.5), whatever convention the model asks for: the rendezvous misses
// and the first borrowing layer fails naming its key, as the AttributeError/KeyError users saw
// (GEMMA4.md, Conventions that changed; Known failure modes).
class MismatchedKeyHandoff : public WrappedHandoff {
 public:
  explicit MismatchedKeyHandoff(const Config& config) : WrappedHandoff(config), config_(config) {}

  void store(int layer, const std::string&, const SharedKv& kv) override {
    WrappedHandoff::store(layer, kv_write_key(config_, layer, KvKeyConvention::kLayerType), kv);
  }
  SharedKv inputs_for(int layer, const std::string&) override {
    return WrappedHandoff::inputs_for(layer, kv_read_key(config_, layer, KvKeyConvention::kLayerIndex));
  }

 private:
  const Config& config_;  // the model's; it outlives the forward call that owns this hand-off
};

template <typename Handoff>
KvHandoffFactory make_factory() {
  return [](const Config& config) { return std::make_unique<Handoff>(config); };
}

}  // namespace

std::vector<Backend> faulty_kv_handoff_backends() {
  std::vector<Backend> out;

  Backend closure = faulty_backend(
      "faulty-checkpoint-closure",
      "a K/V container captured by the checkpoint closure lives across steps and keeps every step's K/V: memory "
      "grows every step (GEMMA4.md, Known failure modes)",
      {Category::kMemoryFlatness});
  closure.kv_handoff = [history = std::make_shared<KvHistory>()](const Config& config) {
    return std::make_unique<CapturedContainerHandoff>(config, history);
  };
  out.push_back(std::move(closure));

  Backend thread_local_kv = faulty_backend(
      "faulty-thread-local-kv",
      "shared K/V pass through a thread-local side channel: a checkpoint recompute on the autograd worker thread "
      "finds nothing and fails (GEMMA4.md, Known failure modes)",
      {Category::kMultithreadedRecompute});
  thread_local_kv.kv_handoff = make_factory<ThreadLocalHandoff>();
  out.push_back(std::move(thread_local_kv));

  Backend process_wide = faulty_backend(
      "faulty-process-wide-kv",
      "shared K/V pass through one process-wide store: two models training at once read each other's K/V in "
      "recompute (GEMMA4.md, Known failure modes)",
      {Category::kMultithreadedRecompute});
  process_wide.kv_handoff = make_factory<ProcessWideHandoff>();
  out.push_back(std::move(process_wide));

  Backend detached = faulty_backend(
      "faulty-detached-recompute",
      "borrowed K/V are detached in a checkpoint recompute: storing layers lose the gradient through the layers that "
      "borrow them (GEMMA4.md, KV sharing)",
      {Category::kMultithreadedRecompute});
  detached.kv_handoff = make_factory<DetachedRecomputeHandoff>();
  out.push_back(std::move(detached));

  Backend key_mismatch = faulty_backend(
      "faulty-kv-key-mismatch",
      "stores K/V under the layer-type key (transformers >= 5.8) but reads the layer-index key (<= 5.5): the "
      "rendezvous misses (GEMMA4.md, Conventions that changed)",
      {Category::kKeyConventions});
  key_mismatch.kv_handoff = make_factory<MismatchedKeyHandoff>();
  out.push_back(std::move(key_mismatch));

  return out;
}

}  // namespace gemma4::impl
