// Time and energy of a piece of GPU work under sustained load, for the benchmarks.
//
// A training step holds the H200 at its power cap, at an SM clock well below the one a burst of a few runs sees
// (docs/benchmarks.md, Session 7), so a kernel's median over 20 runs says how fast it is at full clock, not what it
// costs inside a step. `sustained` runs the work back to back for a while (first `heat_s` untimed, to reach the cap),
// then for `seconds`, and reports the time per run, the energy per run from NVML's energy counter (the driver's
// total since it loaded, in mJ), the mean power, and the SM clock sampled while the runs drain. NVML is opened at run
// time (libnvidia-ml.so.1 comes with the driver, not the toolkit): without it the energy fields are NaN and `note`
// says why. Work shorter than the host's time to queue it (tens of microseconds for a multi-kernel op) measures the
// host instead: the GPU idles between runs, so use this on ops of a millisecond or more.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "fast_llm/tensor/stream.h"

namespace fast_llm::benchmarks {

// The few NVML entry points used, by their documented C signatures (nvmlReturn_t is an int, 0 for success;
// nvmlDevice_t an opaque pointer; clock type 1 is NVML_CLOCK_SM). The device is cuda:0's, found by its PCI bus id:
// NVML numbers GPUs in its own order and ignores CUDA_VISIBLE_DEVICES.
class Nvml {
 public:
  static const Nvml& instance() {
    static const Nvml nvml;
    return nvml;
  }
  bool available() const { return device_ != nullptr; }
  const std::string& failure() const { return failure_; }
  // Millijoules since the driver loaded, or -1.
  double energy_mj() const {
    unsigned long long millijoules = 0;
    return available() && get_energy_(device_, &millijoules) == 0 ? double(millijoules) : -1.0;
  }
  // The current SM clock in MHz, or -1.
  double sm_clock_mhz() const {
    unsigned megahertz = 0;
    return available() && get_clock_(device_, 1, &megahertz) == 0 ? double(megahertz) : -1.0;
  }

 private:
  using Init = int (*)();
  using HandleByPciBusId = int (*)(const char*, void**);
  using TotalEnergy = int (*)(void*, unsigned long long*);
  using ClockInfo = int (*)(void*, int, unsigned*);

  Nvml() {
    void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      failure_ = "libnvidia-ml.so.1 not found";
      return;
    }
    const auto init = reinterpret_cast<Init>(dlsym(library, "nvmlInit_v2"));
    const auto handle_by_bus = reinterpret_cast<HandleByPciBusId>(dlsym(library, "nvmlDeviceGetHandleByPciBusId_v2"));
    get_energy_ = reinterpret_cast<TotalEnergy>(dlsym(library, "nvmlDeviceGetTotalEnergyConsumption"));
    get_clock_ = reinterpret_cast<ClockInfo>(dlsym(library, "nvmlDeviceGetClockInfo"));
    if (!init || !handle_by_bus || !get_energy_ || !get_clock_) {
      failure_ = "libnvidia-ml.so.1 lacks an entry point";
      return;
    }
    char bus_id[32] = {};
    if (cudaDeviceGetPCIBusId(bus_id, int(sizeof(bus_id)), 0) != cudaSuccess) {
      failure_ = "cuda:0 has no PCI bus id";
      return;
    }
    void* device = nullptr;
    if (init() != 0 || handle_by_bus(bus_id, &device) != 0) {
      failure_ = std::string("nvmlInit or the handle of the GPU at ") + bus_id + " failed";
      return;
    }
    unsigned long long probe = 0;
    if (get_energy_(device, &probe) != 0) {
      failure_ = "this GPU reports no energy counter";
      return;
    }
    device_ = device;
  }

  void* device_ = nullptr;
  TotalEnergy get_energy_ = nullptr;
  ClockInfo get_clock_ = nullptr;
  std::string failure_;
};

struct SustainedResult {
  double ms_per_run = 0;
  int64_t runs = 0;
  double joules_per_run = std::numeric_limits<double>::quiet_NaN();
  double watts = std::numeric_limits<double>::quiet_NaN();
  double sm_clock_mhz = std::numeric_limits<double>::quiet_NaN();  // median of the samples taken while draining
  std::string note;  // why the energy is missing, when it is
};

// `estimate_ms`: one run's time (a median from median_ms), to size the batches. `seconds` and `heat_s` must be finite.
inline SustainedResult sustained(const std::function<void()>& run, double estimate_ms, double seconds = 1.0,
                                 double heat_s = 0.5) {
  const Device device = Device::cuda(0);
  const Stream stream = compute_stream(device);
  estimate_ms = std::max(estimate_ms, 1e-3);  // an event pair around almost nothing can read 0
  const auto runs_for = [&](double s) {
    return std::clamp<int64_t>(int64_t(std::ceil(s * 1e3 / estimate_ms)), 1, int64_t(1) << 24);
  };
  for (int64_t i = 0, heat = runs_for(heat_s); i < heat; ++i) run();
  const Nvml& nvml = Nvml::instance();
  Event start(device), stop(device);
  synchronize(device, stream);  // the energy read below must not count the heat runs
  const double energy_before = nvml.energy_mj();
  start.record(stream);
  SustainedResult result;
  result.runs = runs_for(seconds);
  for (int64_t i = 0; i < result.runs; ++i) run();
  stop.record(stream);
  std::vector<double> clocks;
  while (cudaStreamQuery(static_cast<cudaStream_t>(stream.handle)) == cudaErrorNotReady) {
    if (const double clock = nvml.sm_clock_mhz(); clock > 0) clocks.push_back(clock);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop.synchronize();
  const double energy_after = nvml.energy_mj();
  const double device_ms = double(start.elapsed_ms(stop));
  result.ms_per_run = device_ms / double(result.runs);
  if (!clocks.empty()) {
    std::sort(clocks.begin(), clocks.end());
    result.sm_clock_mhz = clocks[clocks.size() / 2];
  }
  if (energy_before < 0 || energy_after < 0) {
    result.note = nvml.available() ? "the energy counter could not be read" : nvml.failure();
  } else {
    // The counter covers the interval between the reads: the runs, plus up to a poll's 5 ms of idle GPU after them.
    const double joules = (energy_after - energy_before) * 1e-3;
    result.joules_per_run = joules / double(result.runs);
    result.watts = joules / (device_ms * 1e-3);
  }
  return result;
}

// The command line of a benchmark with a --sustained mode: `--sustained [seconds]` anywhere (1 s when no number
// follows; `seconds` 0 without the flag, NaN when the number is outside (0, 600]), the other arguments in order.
struct SustainedCommandLine {
  double seconds = 0;
  std::vector<std::string> positional;
};
inline SustainedCommandLine parse_sustained_command_line(int argc, char** argv) {
  SustainedCommandLine result;
  for (int index = 1; index < argc; ++index) {
    if (std::string(argv[index]) != "--sustained") {
      result.positional.push_back(argv[index]);
      continue;
    }
    result.seconds = 1.0;
    if (index + 1 < argc && std::atof(argv[index + 1]) > 0) result.seconds = std::atof(argv[++index]);
    if (!(result.seconds <= 600)) result.seconds = std::numeric_limits<double>::quiet_NaN();
  }
  return result;
}

}  // namespace fast_llm::benchmarks
