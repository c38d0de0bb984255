#pragma once
// A CPU allocator that counts live bytes, for the suite's memory_flatness and for the activation
// memory peaks on the CPU (probe.h): it wraps the CPU allocator that was current when installed (c10::SetCPUAllocator) and forwards every allocation to it. Installed
// once per process and never removed (tensors allocated through it keep its deleter).
#include <cstdint>

namespace gemma4::memory {

// Installs the tracking allocator on first call (later calls do nothing). Call it on one thread
// while no other thread allocates, e.g. at the start of a check.
void install_tracking_cpu_allocator();

// Bytes allocated through the tracking allocator and not yet freed (0 before installation). Only
// differences between two readings mean something: tensors allocated before installation are not
// counted, whenever they are freed.
int64_t tracked_cpu_live_bytes();

// The most live bytes since the last reset (or installation), for peak-memory measurements.
int64_t tracked_cpu_peak_bytes();
void reset_tracked_cpu_peak();  // the peak becomes the current live bytes

}  // namespace gemma4::memory
