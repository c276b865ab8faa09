#include "fast_llm/kernels/op_profiler.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/kernels/registry.h"

namespace fast_llm::kernels {

// One CUDA dispatch of the current window: its variant and the two events around it. Pairs are kept and reused, so a
// recorded step creates events only the first time it needs that many.
struct OpProfiler::Pending {
  Device device;
  std::string id;
  Event start, end;
  explicit Pending(Device device_) : device(device_), start(device_), end(device_) {}
};

OpProfiler& OpProfiler::instance() {
  static OpProfiler profiler;
  return profiler;
}

void OpProfiler::configure(bool cpu, bool cuda) {
  time_cpu_ = cpu;
  time_cuda_ = cuda;
}

void OpProfiler::start_recording() {
  pending_used_ = 0;
  recording_.store(true, std::memory_order_relaxed);
}

void OpProfiler::stop_recording() {
  if (!recording_.exchange(false, std::memory_order_relaxed)) return;
  for (int64_t slot = 0; slot < pending_used_; ++slot) {
    Pending& pending = *pending_[size_t(slot)];
    pending.end.synchronize();
    add(pending.id, double(pending.start.elapsed_ms(pending.end)));
  }
  pending_used_ = 0;
  ++recorded_steps_;
}

// The stream an op's work goes to: `Stream{}` on a CUDA device means that device's compute stream (tensor/stream.h).
static Stream resolve(Device device, Stream stream) {
  return stream.handle == nullptr && !device.is_cpu() ? compute_stream(device) : stream;
}

OpProfiler::Scope OpProfiler::begin(const KernelInfo& info, Device device, Stream stream) {
  Scope scope{.info = &info};
  if (device.is_cpu()) {
    if (time_cpu_) {
      scope.slot = 0;
      scope.host_start = std::chrono::steady_clock::now();
    }
    return scope;
  }
  if (!time_cuda_) return scope;
  if (pending_used_ == int64_t(pending_.size())) pending_.push_back(std::make_unique<Pending>(device));
  std::unique_ptr<Pending>& pending = pending_[size_t(pending_used_)];
  if (!(pending->device == device)) pending = std::make_unique<Pending>(device);
  pending->id = info.id();
  pending->start.record(resolve(device, stream));
  scope.slot = pending_used_++;
  return scope;
}

void OpProfiler::end(const Scope& scope, Device device, Stream stream) {
  if (scope.slot < 0) return;
  if (device.is_cpu()) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - scope.host_start).count();
    add(scope.info->id(), ms);
    return;
  }
  pending_[size_t(scope.slot)]->end.record(resolve(device, stream));
}

void OpProfiler::add(const std::string& id, double ms) {
  auto found = std::find_if(totals_.begin(), totals_.end(), [&](const OpTiming& timing) { return timing.id == id; });
  if (found == totals_.end()) found = totals_.insert(totals_.end(), OpTiming{.id = id});
  found->calls += 1;
  found->total_ms += ms;
}

std::vector<OpTiming> OpProfiler::totals() const {
  std::vector<OpTiming> sorted = totals_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const OpTiming& a, const OpTiming& b) { return a.total_ms > b.total_ms; });
  return sorted;
}

void OpProfiler::reset() {
  totals_.clear();
  recorded_steps_ = 0;
}

std::string OpProfiler::table(int width) const {
  const std::vector<OpTiming> sorted = totals();
  const double steps = double(std::max<int64_t>(recorded_steps_, 1));
  double total = 0.0;
  for (const OpTiming& timing : sorted) total += timing.total_ms;
  // Columns after the id: calls/step (10), ms/step (12), share (8).
  const int id_width = std::max(10, width - 30);
  std::string out = fmt::format("{:<{}}{:>10}{:>12}{:>8}\n", "kernel", id_width, "calls/step", "ms/step", "share");
  for (const OpTiming& timing : sorted) {
    std::string id = timing.id;
    if (int(id.size()) > id_width - 1) id = id.substr(0, size_t(id_width - 2)) + "~";
    out += fmt::format("{:<{}}{:>10.1f}{:>12.3f}{:>7.1f}%\n", id, id_width, double(timing.calls) / steps,
                       timing.total_ms / steps, total > 0 ? 100.0 * timing.total_ms / total : 0.0);
  }
  out += fmt::format("{:<{}}{:>10}{:>12.3f}{:>8}\n", "total", id_width, "", total / steps, "");
  return out;
}

namespace detail {
bool profiler_recording() { return OpProfiler::instance().recording(); }

void run_profiled(const KernelInfo& info, Device device, Stream stream, const std::function<void()>& run) {
  OpProfiler& profiler = OpProfiler::instance();
  const OpProfiler::Scope scope = profiler.begin(info, device, stream);
  run();
  profiler.end(scope, device, stream);
}
}  // namespace detail

}  // namespace fast_llm::kernels
