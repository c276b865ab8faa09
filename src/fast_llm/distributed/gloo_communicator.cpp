// The Gloo engine of Communicator: CPU tensors, and CUDA tensors staged through page-locked host memory.
//
// Rendezvous: a group's keys live under a prefix of the store ("gloo/<name>", a split's "<parent>/split<k>/<color>"),
// where Gloo's full mesh publishes every rank's pair addresses and connects a TCP pair to every peer. The TCP device
// binds to FAST_LLM_GLOO_INTERFACE (an address of this machine, or a network interface such as eth0), else to
// 127.0.0.1 when every rank runs on this machine (CommunicatorOptions::local), else to the address of this machine's
// hostname. A group of one binds to 127.0.0.1 and meets through an in-process store, so a
// single-process run needs neither a store nor a hostname that resolves. Splits share their parent's device.
//
// Operations run on the communicator's worker thread (operation_queue.h) in issue order, collectives with consecutive
// tags, so that every rank's k-th collective meets the others' k-th. Send and recv have slots of their own, numbered
// per peer and direction; they match like NCCL's outside a group: a send completes once the peer has posted the
// matching recv, so two ranks that both send first wait for each other until the timeout.
// Reductions run Gloo's allreduce with our element functions (max and min keep a NaN). bf16 and fp16 are widened to a
// float32 copy, reduced in float32 and rounded once at the end. reduce_scatter is an allreduce of a scratch copy of
// the whole input, of which this rank keeps its part: about twice the traffic of a ring reduce-scatter and a scratch
// of the input's size (Debian's Gloo has no new-style reduce-scatter); all_gather, broadcast, send and recv move bytes.
// CUDA tensors: the worker orders a staging stream after the caller's stream as it was at issue (an event), copies the
// inputs into a page-locked buffer the communicator keeps (grown when an operation needs more), runs the operation on
// the host and copies the result back on the staging stream, waiting for each copy; Work::wait(stream) is a host wait.
// Faults: a Gloo error (timeout, closed peer) or a store timeout becomes an Error naming the operation and the group.
// Gloo writes to its sockets with writev, which cannot ask for MSG_NOSIGNAL: a peer that died would end this process
// with SIGPIPE, silently. A process that connects a Gloo group ignores SIGPIPE, so the write fails with EPIPE instead.
// Gloo closes every pair of a group after a timeout, so the communicator is broken from then on: later operations
// fail at once, naming the first failure.
#include <arpa/inet.h>
#include <csignal>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>

#include "fast_llm/distributed/engines.h"
#include "fast_llm/distributed/gloo_store.h"
#include "fast_llm/distributed/operation_queue.h"

namespace fast_llm::distributed::detail {

namespace {

constexpr const char* kComponent = "distributed";
// Above the slot prefixes of Gloo's collectives (0x01-0x08), so point-to-point messages never meet a collective's.
constexpr uint8_t kPointToPointSlotPrefix = 0x80;
// The tag of the barrier that ends a group's creation; its operations take the tags after it.
constexpr uint32_t kConnectedTag = 0;
// Where the outputs start in the staging buffer, after the inputs.
constexpr size_t kStagingAlignment = 64;

// What a communicator and the groups split from it share.
struct GlooShared {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<Store> store;  // null for a group of one created without a store
  Device tensor_device;
  std::chrono::milliseconds timeout{};
  Stream staging_stream;  // CUDA: the stream of the staging copies
};

bool is_numeric_address(const char* text) {
  std::array<unsigned char, sizeof(in6_addr)> address{};
  return inet_pton(AF_INET, text, address.data()) == 1 || inet_pton(AF_INET6, text, address.data()) == 1;
}

gloo::transport::tcp::attr device_attributes(int size, bool local) {
  gloo::transport::tcp::attr attributes;
  const char* setting = std::getenv("FAST_LLM_GLOO_INTERFACE");
  if (size == 1 || (local && (setting == nullptr || *setting == '\0'))) {
    attributes.hostname = "127.0.0.1";
    return attributes;
  }
  if (setting != nullptr && *setting != '\0') {
    if (is_numeric_address(setting)) {
      attributes.hostname = setting;
    } else {
      FLM_CHECK(if_nametoindex(setting) != 0, kComponent,
                "FAST_LLM_GLOO_INTERFACE={} is neither an address nor a network interface of this machine", setting);
      attributes.iface = setting;
    }
    return attributes;
  }
  std::array<char, 256> hostname{};
  FLM_CHECK(gethostname(hostname.data(), hostname.size() - 1) == 0, kComponent,
            "Gloo cannot read this machine's hostname ({}); set FAST_LLM_GLOO_INTERFACE to an address of this machine "
            "or a network interface",
            std::strerror(errno));
  // Gloo does not check that the name resolves before using the result.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  const int status = getaddrinfo(hostname.data(), nullptr, &hints, &resolved);
  FLM_CHECK(status == 0, kComponent,
            "Gloo binds to the address of this machine's hostname '{}', which does not resolve ({}); set "
            "FAST_LLM_GLOO_INTERFACE to an address of this machine or a network interface (eth0)",
            hostname.data(), gai_strerror(status));
  freeaddrinfo(resolved);
  attributes.hostname = hostname.data();
  return attributes;
}

// The full mesh of one group: a TCP pair to every other rank, addresses exchanged under `prefix` of the store; it
// returns once every rank of the group is connected.
std::shared_ptr<gloo::Context> connect_group(const GlooShared& shared, int rank, int size, const std::string& prefix) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(shared.timeout);
  std::shared_ptr<gloo::transport::Device> device = shared.device;
  if (size == 1) {
    gloo::rendezvous::HashStore local;
    context->connectFullMesh(local, device);
  } else {
    GlooStore store(shared.store, prefix);
    context->connectFullMesh(store, device);
  }
  // A rank returns from the full mesh once its own pairs are connected; without this barrier, one that went on and
  // destroyed its communicator at once could close pairs a slower peer is still connecting.
  gloo::BarrierOptions barrier(context);
  barrier.setTag(kConnectedTag);
  barrier.setTimeout(shared.timeout);
  gloo::barrier(barrier);
  return context;
}

std::vector<uint8_t> encode_color(int color) {
  std::vector<uint8_t> bytes(sizeof(int32_t));
  const auto value = int32_t(color);
  std::memcpy(bytes.data(), &value, sizeof(value));
  return bytes;
}

int decode_color(const std::vector<uint8_t>& bytes, const std::string& key) {
  FLM_CHECK(bytes.size() == sizeof(int32_t), kComponent, "store key '{}' holds {} bytes, not a split color", key,
            bytes.size());
  int32_t value = 0;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

bool is_half(DType dtype) { return dtype == DType::bfloat16 || dtype == DType::float16; }

// A float32 copy of a bf16 or fp16 tensor's values (the accumulator of their reductions), flattened.
Tensor widen(const Tensor& tensor) {
  Tensor wide = Tensor::empty(Shape{tensor.numel()}, DType::float32);
  float* values = wide.data_as<float>();
  const auto count = size_t(tensor.numel());
  if (tensor.dtype() == DType::bfloat16) {
    const bfloat16* source = tensor.data_as<bfloat16>();
    for (size_t index = 0; index < count; ++index) values[index] = to_float(source[index]);
  } else {
    const float16* source = tensor.data_as<float16>();
    for (size_t index = 0; index < count; ++index) values[index] = to_float(source[index]);
  }
  return wide;
}

// Rounds the float32 `values` into `tensor` (bf16 or fp16, as many elements), to nearest even.
void narrow(const Tensor& values, const Tensor& tensor) {
  const float* source = values.data_as<float>();
  const auto count = size_t(tensor.numel());
  if (tensor.dtype() == DType::bfloat16) {
    bfloat16* destination = tensor.data_as<bfloat16>();
    for (size_t index = 0; index < count; ++index) destination[index] = to_bfloat16(source[index]);
  } else {
    float16* destination = tensor.data_as<float16>();
    for (size_t index = 0; index < count; ++index) destination[index] = to_float16(source[index]);
  }
}

template <class T>
T add(T first, T second) {
  return T(first + second);
}
// `first != first` is a NaN: it wins, as in a reduction on the device.
template <class T>
T maximum(T first, T second) {
  return first != first || first > second ? first : second;
}
template <class T>
T minimum(T first, T second) {
  return first != first || first < second ? first : second;
}

// Gloo's reduction function: `output` may be either input.
template <class T, T (*combine)(T, T)>
void combine_elements(void* output, const void* first, const void* second, size_t count) {
  auto* result = static_cast<T*>(output);
  const auto* left = static_cast<const T*>(first);
  const auto* right = static_cast<const T*>(second);
  for (size_t index = 0; index < count; ++index) result[index] = combine(left[index], right[index]);
}

template <class T>
gloo::AllreduceOptions::Func reduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return &combine_elements<T, add<T>>;
    case ReduceOp::max:
      return &combine_elements<T, maximum<T>>;
    case ReduceOp::min:
      return &combine_elements<T, minimum<T>>;
  }
  FLM_ASSERT(false, "unknown reduction {}", int(op));
  return nullptr;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<const GlooShared> shared, std::shared_ptr<gloo::Context> context,
                   std::vector<int> world_ranks, const std::string& name, std::string prefix)
      : shared_(std::move(shared)),
        context_(std::move(context)),
        world_ranks_(std::move(world_ranks)),
        name_(group_display_name(name, world_ranks_)),
        prefix_(std::move(prefix)),
        sends_(size_t(context_->size), 0),
        receives_(size_t(context_->size), 0) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  const std::string& name() const override { return name_; }

  std::unique_ptr<Work> all_reduce(Tensor& tensor, ReduceOp op, Stream stream) override {
    check_tensor("all_reduce", tensor);
    check_reducible("all_reduce", tensor.dtype());
    return submit(Operation{.name = fmt::format("all_reduce ({})", reduce_op_name(op)),
                            .input = tensor,
                            .output = tensor,
                            .in_place = true,
                            .run = [this, op](const Tensor&, const Tensor& host) { all_reduce_host(host, op); }},
                  stream);
  }

  std::unique_ptr<Work> reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op, Stream stream) override {
    check_tensor("reduce_scatter", input);
    check_tensor("reduce_scatter", output);
    check_reducible("reduce_scatter", input.dtype());
    FLM_CHECK(input.dtype() == output.dtype(), kComponent, "reduce_scatter on {}: input {}, output {}", name_,
              dtype_name(input.dtype()), dtype_name(output.dtype()));
    FLM_CHECK(input.numel() == output.numel() * size(), kComponent,
              "reduce_scatter on {}: input of {} elements, output of {} (the input must be {} outputs)", name_,
              input.numel(), output.numel(), size());
    return submit(Operation{.name = fmt::format("reduce_scatter ({})", reduce_op_name(op)),
                            .input = input,
                            .output = output,
                            .run = [this, op](const Tensor& host_input,
                                              const Tensor& host_output) {
                              reduce_scatter_host(host_input, host_output, op);
                            }},
                  stream);
  }

  std::unique_ptr<Work> all_gather(const Tensor& input, Tensor& output, Stream stream) override {
    check_tensor("all_gather", input);
    check_tensor("all_gather", output);
    FLM_CHECK(input.dtype() == output.dtype(), kComponent, "all_gather on {}: input {}, output {}", name_,
              dtype_name(input.dtype()), dtype_name(output.dtype()));
    FLM_CHECK(output.numel() == input.numel() * size(), kComponent,
              "all_gather on {}: input of {} elements, output of {} (the output must be {} inputs)", name_,
              input.numel(), output.numel(), size());
    return submit(Operation{.name = "all_gather",
                            .input = input,
                            .output = output,
                            .run = [this](const Tensor& host_input,
                                          const Tensor& host_output) { all_gather_host(host_input, host_output); }},
                  stream);
  }

  std::unique_ptr<Work> broadcast(Tensor& tensor, int root, Stream stream) override {
    check_tensor("broadcast", tensor);
    FLM_CHECK(root >= 0 && root < size(), kComponent, "broadcast on {}: root {} outside the group of {}", name_, root,
              size());
    return submit(Operation{.name = fmt::format("broadcast (root {})", root),
                            .input = tensor,
                            .output = tensor,
                            .in_place = true,
                            .run = [this, root](const Tensor&, const Tensor& host) { broadcast_host(host, root); }},
                  stream);
  }

  std::unique_ptr<Work> send(const Tensor& tensor, int peer, Stream stream) override {
    check_tensor("send", tensor);
    check_peer("send", peer);
    return submit(Operation{.name = fmt::format("send (to rank {})", peer),
                            .input = tensor,
                            .run = [this, peer](const Tensor& host, const Tensor&) { send_host(host, peer); }},
                  stream);
  }

  std::unique_ptr<Work> recv(Tensor& tensor, int peer, Stream stream) override {
    check_tensor("recv", tensor);
    check_peer("recv", peer);
    return submit(Operation{.name = fmt::format("recv (from rank {})", peer),
                            .output = tensor,
                            .run = [this, peer](const Tensor&, const Tensor& host) { recv_host(host, peer); }},
                  stream);
  }

  void barrier() override {
    submit(Operation{.name = "barrier", .run = [this](const Tensor&, const Tensor&) { barrier_host(); }}, Stream{})
        ->wait();
  }

  std::unique_ptr<Communicator> split(int color, const std::string& name) override {
    FLM_CHECK(!name.empty(), kComponent, "split of {}: the new group needs a name", name_);
    std::unique_ptr<Communicator> group;
    submit(Operation{.name = fmt::format("split (color {}, group '{}')", color, name),
                     .run = [&](const Tensor&, const Tensor&) { group = split_host(color, name); }},
           Stream{})
        ->wait();
    return group;
  }

 private:
  // One operation as the worker runs it. `run` gets host tensors: `input` and `output` themselves on the CPU, copies
  // in the staging buffer for CUDA tensors.
  struct Operation {
    std::string name;
    Tensor input;   // read; undefined for recv
    Tensor output;  // written; undefined for send, the same tensor as `input` when `in_place`
    bool in_place = false;
    std::function<void(const Tensor& input, const Tensor& output)> run;
  };

  void check_tensor(const char* operation, const Tensor& tensor) const {
    FLM_CHECK(tensor.defined(), kComponent, "{} on {}: undefined tensor", operation, name_);
    FLM_CHECK(tensor.is_contiguous(), kComponent, "{} on {}: the tensor must be contiguous (shape {}, strides {})",
              operation, name_, tensor.shape().str(), tensor.strides().str());
    FLM_CHECK(tensor.device() == shared_->tensor_device, kComponent,
              "{} on {}: a tensor on {}, but the communicator moves {} tensors", operation, name_,
              tensor.device().str(), shared_->tensor_device.str());
  }

  void check_reducible(const char* operation, DType dtype) const {
    FLM_CHECK(dtype == DType::float32 || dtype == DType::float64 || is_half(dtype) || dtype == DType::int32 ||
                  dtype == DType::int64,
              kComponent, "{} on {}: cannot reduce {} (float32, float64, bfloat16, float16, int32, int64)", operation,
              name_, dtype_name(dtype));
  }

  void check_peer(const char* operation, int peer) const {
    FLM_CHECK(peer >= 0 && peer < size() && peer != rank(), kComponent,
              "{} on {}: peer {} (another rank of the group of {}; this is rank {})", operation, name_, peer, size(),
              rank());
  }

  std::unique_ptr<Work> submit(Operation operation, Stream stream) {
    std::shared_ptr<Event> issued;
    if (shared_->tensor_device.is_cuda() && (operation.input.defined() || operation.output.defined())) {
      issued = std::make_shared<Event>(shared_->tensor_device);
      issued->record(stream);
    }
    return queue_.submit([this, operation = std::move(operation), issued] { execute(operation, issued.get()); });
  }

  // On the worker thread.
  void execute(const Operation& operation, const Event* issued) {
    FLM_CHECK(failure_.empty(), kComponent, "{} on {} not run: an earlier operation failed ({})", operation.name,
              name_, failure_);
    try {
      if (issued == nullptr) {
        operation.run(operation.input, operation.output);
      } else {
        run_staged(operation, *issued);
      }
    } catch (const std::exception& error) {
      failure_ = fmt::format("{}: {}", operation.name, error.what());
      throw Error(kComponent, fmt::format("{} on {} failed on rank {}: {}", operation.name, name_, rank(),
                                          error.what()));
    }
  }

  void run_staged(const Operation& operation, const Event& issued) {
    const Device device = shared_->tensor_device;
    const Stream stream = shared_->staging_stream;
    issued.wait(stream);
    const size_t input_bytes = operation.input.defined() ? operation.input.nbytes() : 0;
    const size_t output_offset = (input_bytes + kStagingAlignment - 1) / kStagingAlignment * kStagingAlignment;
    const size_t output_bytes = operation.output.defined() && !operation.in_place ? operation.output.nbytes() : 0;
    const size_t needed = output_offset + output_bytes;
    if (!staging_.defined() || staging_.nbytes() < needed) {
      staging_ = Tensor();  // the old buffer goes before the new one is page-locked
      staging_ = Tensor::empty_pinned(Shape{int64_t(needed)}, DType::uint8);
    }
    Tensor host_input;
    Tensor host_output;
    if (operation.input.defined()) {
      host_input = staged(0, operation.input);
      host_input.copy_bytes_from(operation.input, stream);
    }
    if (operation.output.defined())
      host_output = operation.in_place ? host_input : staged(output_offset, operation.output);
    synchronize(device, stream);
    operation.run(host_input, host_output);
    if (operation.output.defined()) {
      Tensor output = operation.output;
      output.copy_bytes_from(host_output, stream);
      synchronize(device, stream);
    }
  }

  // A host tensor shaped like `tensor` at `offset` bytes into the staging buffer.
  Tensor staged(size_t offset, const Tensor& tensor) const {
    return Tensor::from_blob(static_cast<char*>(staging_.data()) + offset, tensor.shape(), tensor.dtype(),
                             Device::cpu(), staging_.storage());
  }

  // The host operations (worker thread). Every collective takes the next tag, also when it has nothing to move, so the
  // ranks' tags stay in step.

  template <class T>
  void allreduce_typed(const Tensor& tensor, ReduceOp op, uint32_t tag) {
    gloo::AllreduceOptions options(context_);
    options.setOutput(static_cast<T*>(tensor.data()), size_t(tensor.numel()));
    options.setReduceFunction(reduction<T>(op));
    options.setTag(tag);
    options.setTimeout(shared_->timeout);
    gloo::allreduce(options);
  }

  // `tensor`: float32, float64, int32 or int64, reduced in place.
  void allreduce_in_place(const Tensor& tensor, ReduceOp op) {
    const uint32_t tag = next_tag_++;
    if (tensor.numel() == 0) return;
    switch (tensor.dtype()) {
      case DType::float32:
        return allreduce_typed<float>(tensor, op, tag);
      case DType::float64:
        return allreduce_typed<double>(tensor, op, tag);
      case DType::int32:
        return allreduce_typed<int32_t>(tensor, op, tag);
      case DType::int64:
        return allreduce_typed<int64_t>(tensor, op, tag);
      default:
        FLM_ASSERT(false, "allreduce of {}", dtype_name(tensor.dtype()));
    }
  }

  void all_reduce_host(const Tensor& tensor, ReduceOp op) {
    if (!is_half(tensor.dtype())) return allreduce_in_place(tensor, op);
    Tensor wide = widen(tensor);
    allreduce_in_place(wide, op);
    narrow(wide, tensor);
  }

  void reduce_scatter_host(const Tensor& input, const Tensor& output, ReduceOp op) {
    Tensor scratch;
    if (is_half(input.dtype())) {
      scratch = widen(input);
    } else {
      scratch = Tensor::empty(Shape{input.numel()}, input.dtype());
      scratch.copy_bytes_from(input.flatten());
    }
    allreduce_in_place(scratch, op);
    const int64_t part = output.numel();
    Tensor mine = scratch.slice(0, rank() * part, (rank() + 1) * part);
    if (is_half(input.dtype())) {
      narrow(mine, output);
    } else {
      Tensor destination = output.flatten();
      destination.copy_bytes_from(mine);
    }
  }

  void all_gather_host(const Tensor& input, const Tensor& output) {
    const uint32_t tag = next_tag_++;
    // memmove: the input may be this rank's part of the output already (an in-place gather).
    std::memmove(static_cast<char*>(output.data()) + size_t(rank()) * input.nbytes(), input.data(), input.nbytes());
    if (output.nbytes() == 0) return;
    gloo::AllgatherOptions options(context_);
    options.setOutput(static_cast<uint8_t*>(output.data()), output.nbytes());  // in place: this rank's part is set
    options.setTag(tag);
    options.setTimeout(shared_->timeout);
    gloo::allgather(options);
  }

  void broadcast_host(const Tensor& tensor, int root) {
    const uint32_t tag = next_tag_++;
    if (tensor.nbytes() == 0) return;
    gloo::BroadcastOptions options(context_);
    options.setOutput(static_cast<uint8_t*>(tensor.data()), tensor.nbytes());
    options.setRoot(root);
    options.setTag(tag);
    options.setTimeout(shared_->timeout);
    gloo::broadcast(options);
  }

  void barrier_host() {
    gloo::BarrierOptions options(context_);
    options.setTag(next_tag_++);
    options.setTimeout(shared_->timeout);
    gloo::barrier(options);
  }

  // The slot of the `count`-th message from `sender` to `receiver`: both ends count it the same way.
  static uint64_t point_to_point_slot(int sender, int receiver, uint32_t count) {
    return gloo::Slot::build(kPointToPointSlotPrefix, count * 2 + (sender < receiver ? 0 : 1));
  }

  void send_host(const Tensor& tensor, int peer) {
    const uint32_t count = sends_[size_t(peer)]++;
    if (tensor.nbytes() == 0) return;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer =
        context_->createUnboundBuffer(tensor.data(), tensor.nbytes());
    buffer->send(peer, point_to_point_slot(rank(), peer, count));
    buffer->waitSend(shared_->timeout);
  }

  void recv_host(const Tensor& tensor, int peer) {
    const uint32_t count = receives_[size_t(peer)]++;
    if (tensor.nbytes() == 0) return;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer =
        context_->createUnboundBuffer(tensor.data(), tensor.nbytes());
    buffer->recv(peer, point_to_point_slot(peer, rank(), count));
    buffer->waitRecv(shared_->timeout);
  }

  // Every rank publishes its color under this split's prefix and reads the others'; the ranks of one color connect a
  // new full mesh under the prefix of that color.
  std::unique_ptr<Communicator> split_host(int color, const std::string& name) {
    const std::string split_prefix = fmt::format("{}/split{}", prefix_, splits_++);
    std::vector<int> colors(size_t(size()), color);
    if (size() > 1) {
      shared_->store->set(fmt::format("{}/color{}", split_prefix, rank()), encode_color(color));
      for (int peer = 0; peer < size(); ++peer) {
        const std::string key = fmt::format("{}/color{}", split_prefix, peer);
        colors[size_t(peer)] = decode_color(shared_->store->get(key), key);
      }
    }
    if (color < 0) return nullptr;
    std::vector<int> world_ranks;
    int group_rank = 0;
    for (int peer = 0; peer < size(); ++peer) {
      if (colors[size_t(peer)] != color) continue;
      if (peer == rank()) group_rank = int(world_ranks.size());
      world_ranks.push_back(world_ranks_[size_t(peer)]);
    }
    const std::string group_prefix = fmt::format("{}/{}", split_prefix, color);
    std::shared_ptr<gloo::Context> context = connect_group(*shared_, group_rank, int(world_ranks.size()), group_prefix);
    return std::make_unique<GlooCommunicator>(shared_, std::move(context), std::move(world_ranks), name,
                                              group_prefix);
  }

  std::shared_ptr<const GlooShared> shared_;
  std::shared_ptr<gloo::Context> context_;
  std::vector<int> world_ranks_;
  std::string name_;
  std::string prefix_;
  // Worker-thread state.
  uint32_t next_tag_ = kConnectedTag + 1;
  std::vector<uint32_t> sends_;     // messages sent to each peer so far
  std::vector<uint32_t> receives_;  // messages received from each peer so far
  int splits_ = 0;
  std::string failure_;  // the first failed operation and its error
  Tensor staging_;       // CUDA: page-locked bytes, inputs then outputs
  OperationQueue queue_;  // last: its destructor runs the queued operations while the members above still exist
};

}  // namespace

std::unique_ptr<Communicator> create_gloo_communicator(const CommunicatorOptions& options) {
  auto shared = std::make_shared<GlooShared>();
  shared->store = options.store;
  shared->tensor_device = options.device;
  shared->timeout = options.timeout;
  if (options.device.is_cuda()) shared->staging_stream = create_stream(options.device);
  std::vector<int> world_ranks(size_t(options.size));
  std::iota(world_ranks.begin(), world_ranks.end(), 0);
  const std::string display_name = group_display_name(options.name, world_ranks);
  const std::string prefix = "gloo/" + options.name;
  if (options.size > 1) {
    // Each rank of a group counts itself once; a second group of the same name on this store would reuse its keys.
    const int64_t members = options.store->add(prefix + "/members", 1);
    FLM_CHECK(members <= options.size, kComponent,
              "a Gloo group named '{}' was already created on {}: give each group its own name or store",
              options.name, options.store->describe());
  }
  const gloo::transport::tcp::attr attributes = device_attributes(options.size, options.local);
  std::signal(SIGPIPE, SIG_IGN);
  std::shared_ptr<gloo::Context> context;
  try {
    shared->device = gloo::transport::tcp::CreateDevice(attributes);
    context = connect_group(*shared, options.rank, options.size, prefix);
  } catch (const std::exception& error) {
    throw Error(kComponent,
                fmt::format("connecting {} failed on rank {}: {}", display_name, options.rank, error.what()));
  }
  return std::make_unique<GlooCommunicator>(std::move(shared), std::move(context), std::move(world_ranks),
                                            options.name, prefix);
}

}  // namespace fast_llm::distributed::detail
