#include "bench/case_cache.h"

#include <cstdio>

#include "bench/device.h"
#include "bench/skip.h"

namespace gemma4::bench {
namespace {

struct Cached {
  std::string key;
  torch::Device device{torch::kCPU};
  std::shared_ptr<void> value;
  uint64_t built = 0;
};

Cached& cached() {
  static Cached c;
  return c;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(int64_t{1} << 30));
  return text;
}

}  // namespace

void* detail::cached_case(const std::string& key, const torch::Device& device, double bytes_needed,
                          const std::function<std::shared_ptr<void>()>& make) {
  Cached& c = cached();
  if (c.value && c.key == key) return c.value.get();
  drop_cached_case();
  if (device.is_cuda()) {
    const int64_t free = free_device_bytes(device);
    if (bytes_needed > static_cast<double>(free)) {
      throw Skip("needs about " + gib(bytes_needed) + " of device memory (estimate), " + gib(free) + " free");
    }
  }
  c.value = make();
  ++c.built;
  c.key = key;
  c.device = device;
  return c.value.get();
}

uint64_t cases_built() { return cached().built; }

void drop_cached_case() {
  Cached& c = cached();
  c.value.reset();
  c.key.clear();
  release_cached_memory(c.device);
}

}  // namespace gemma4::bench
