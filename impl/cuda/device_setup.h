#pragma once
// What the kernels' launchers need to know of a device, found once per device: its SMs and DRAM
// bandwidth, and a kernel's shared-memory opt-in with how many of its blocks fit an SM. Host code
// of the .cu files (the kernels are template arguments).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace gemma4::impl::cuda {

// A device's SMs and peak DRAM bandwidth per SM in GB/s (double data rate x bus width x memory
// clock). Read once per device: the memory clock attribute takes about half a millisecond to query
// on an H200.
struct DeviceFacts {
  int sms = 1;
  double gbps_per_sm = 0.0;  // 0: unknown
};

inline DeviceFacts device_facts(int device) {
  static const std::vector<DeviceFacts> per_device = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    std::vector<DeviceFacts> v(size_t(std::max(count, 0)));
    for (int d = 0; d < count; ++d) {
      int sms = 0, memory_khz = 0, bus_bits = 0;
      const bool read = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d) == cudaSuccess &&
                        cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, d) == cudaSuccess &&
                        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, d) == cudaSuccess;
      if (!read) {
        (void)cudaGetLastError();  // this query's own error (not one of the caller's)
      } else if (sms > 0) {
        v[size_t(d)] = {sms, 2.0 * memory_khz * 1e3 * (bus_bits / 8) / 1e9 / sms};
      }
    }
    return v;
  }();
  return device >= 0 && size_t(device) < per_device.size() ? per_device[size_t(device)] : DeviceFacts{};
}

// Kernel's shared-memory opt-in (Bytes of dynamic shared memory) and how many of its blocks of
// Threads fit an SM, on `device` (the current one). The opt-in is a property of the kernel on one
// device, so it is made once per device: a process that runs on a second GPU needs it there too.
// Two threads that race here both make the same opt-in, which is harmless.
template <auto Kernel, int Threads, int Bytes>
int resident_blocks(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> per_device[kMaxDevices] = {};  // 0: not set up yet
  auto set_up = [] {
    cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Bytes);
    int n = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kernel, Threads, Bytes);
    return std::max(n, 1);
  };
  if (device < 0 || device >= kMaxDevices) return set_up();
  int n = per_device[device].load(std::memory_order_relaxed);
  if (n == 0) {
    n = set_up();
    per_device[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace gemma4::impl::cuda
