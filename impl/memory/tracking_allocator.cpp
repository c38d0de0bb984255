#include "impl/memory/tracking_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <limits>
#include <mutex>
#include <unordered_map>

namespace gemma4::memory {
namespace {

// Each allocation is handed out with data == context (as the default CPU allocator does, so that
// raw_allocate and is_simple_data_ptr keep working) and our deleter, which looks up the wrapped
// allocation's own deleter and context.
class TrackingAllocator final : public c10::Allocator {
 public:
  explicit TrackingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    if (data == nullptr) return inner;  // zero bytes: nothing to count
    const c10::Device device = inner.device();
    const c10::DeleterFnPtr deleter = inner.get_deleter();
    void* context = inner.release_context();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.emplace(data, Entry{n, deleter, context});
    }
    const int64_t live = bytes_ += static_cast<int64_t>(n);
    int64_t peak = peak_.load();
    while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
    }
    return c10::DataPtr(data, data, &TrackingAllocator::free, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &TrackingAllocator::free; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  int64_t live_bytes() const { return bytes_.load(); }
  int64_t peak_bytes() const { return peak_.load(); }
  void reset_peak() { peak_ = bytes_.load(); }

 private:
  struct Entry {
    size_t bytes;
    c10::DeleterFnPtr deleter;
    void* context;
  };

  static void free(void* data);

  c10::Allocator* base_;
  std::mutex mutex_;
  std::unordered_map<void*, Entry> live_;
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> peak_{0};
};

// Never destroyed: tensors freed at process exit still call into it.
TrackingAllocator* g_tracker = nullptr;
std::once_flag g_install;

void TrackingAllocator::free(void* data) {
  Entry e;
  {
    std::lock_guard<std::mutex> lock(g_tracker->mutex_);
    auto it = g_tracker->live_.find(data);
    if (it == g_tracker->live_.end()) return;  // not ours: cannot happen, and freeing it blind would be worse
    e = it->second;
    g_tracker->live_.erase(it);
  }
  g_tracker->bytes_ -= static_cast<int64_t>(e.bytes);
  if (e.deleter) e.deleter(e.context);
}

}  // namespace

void install_tracking_cpu_allocator() {
  std::call_once(g_install, [] {
    g_tracker = new TrackingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(g_tracker, /*priority=*/std::numeric_limits<uint8_t>::max());
  });
}

int64_t tracked_cpu_live_bytes() { return g_tracker ? g_tracker->live_bytes() : 0; }

int64_t tracked_cpu_peak_bytes() { return g_tracker ? g_tracker->peak_bytes() : 0; }

void reset_tracked_cpu_peak() {
  if (g_tracker) g_tracker->reset_peak();
}

}  // namespace gemma4::memory
