// Tests of the communicators on CUDA tensors: Gloo with host staging (two ranks as threads sharing GPU 0, which NCCL
// refuses), NCCL alone on one GPU, and NCCL between two GPUs when the machine has them. Each case skips itself when no
// (or too few) GPUs are visible. Results are read back on the host and checked against values computed here.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/memory_store.h"
#include "fast_llm/distributed/communicator.h"

namespace fast_llm::distributed {
namespace {

using std::chrono::seconds;

const bool kLoopback = [] { return setenv("FAST_LLM_GLOO_INTERFACE", "127.0.0.1", 1) == 0; }();

// `values` on `device`, copied on the device's compute stream.
Tensor device_tensor(const std::vector<float>& values, DType dtype, Device device) {
  return Tensor::from_values(values, Shape{int64_t(values.size())}, dtype).to(device, Stream{});
}

std::vector<double> host_values(const Tensor& tensor) {
  Tensor host = tensor.to(Device::cpu(), Stream{});
  std::vector<double> values;
  for (int64_t index = 0; index < host.numel(); ++index) values.push_back(host.item_as_double(std::array{index}));
  return values;
}

// Runs `body` on `size` threads, rank r with a communicator of `backend` on `devices[r]`.
void run_ranks(CommunicationBackend backend, const std::vector<Device>& devices,
               const std::function<void(Communicator&)>& body) {
  const int size = int(devices.size());
  auto store = std::make_shared<test::MemoryStore>();
  std::vector<std::string> errors(devices.size());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto communicator = create_communicator(CommunicatorOptions{.backend = backend,
                                                                    .device = devices[size_t(rank)],
                                                                    .rank = rank,
                                                                    .size = size,
                                                                    .store = store,
                                                                    .timeout = seconds(120)});
        body(*communicator);
      } catch (const std::exception& error) {
        errors[size_t(rank)] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(errors[size_t(rank)], "") << "rank " << rank;
}

// Every operation on two ranks, each result checked on the host.
void check_two_ranks(Communicator& communicator, Device device) {
  const int rank = communicator.rank();
  const auto value = float(rank + 1);
  for (DType dtype : {DType::float32, DType::bfloat16, DType::int64}) {
    Tensor summed = device_tensor({value, -value, 2 * value}, dtype, device);
    communicator.all_reduce(summed, ReduceOp::sum, Stream{})->wait(Stream{});
    EXPECT_EQ(host_values(summed), (std::vector<double>{3, -3, 6})) << dtype_name(dtype);
  }
  Tensor maximum = device_tensor({value, -value}, DType::float16, device);
  communicator.all_reduce(maximum, ReduceOp::max, Stream{})->wait();
  EXPECT_EQ(host_values(maximum), (std::vector<double>{2, -1}));
  Tensor minimum = device_tensor({value, -value}, DType::float32, device);
  communicator.all_reduce(minimum, ReduceOp::min, Stream{})->wait();
  EXPECT_EQ(host_values(minimum), (std::vector<double>{1, -2}));

  // Inputs stay alive until their operation has been waited for (NCCL reads them on its own stream).
  Tensor scatter_input = device_tensor({value, 10 * value, 100 * value, 1000 * value}, DType::float32, device);
  Tensor scattered = Tensor::empty(Shape{2}, DType::float32, device);
  communicator.reduce_scatter(scatter_input, scattered, ReduceOp::sum, Stream{})->wait(Stream{});
  EXPECT_EQ(host_values(scattered), rank == 0 ? (std::vector<double>{3, 30}) : (std::vector<double>{300, 3000}));

  Tensor gathered = Tensor::empty(Shape{4}, DType::int32, device);
  Tensor gather_input = device_tensor({value, -value}, DType::int32, device);
  communicator.all_gather(gather_input, gathered, Stream{})->wait(Stream{});
  EXPECT_EQ(host_values(gathered), (std::vector<double>{1, -1, 2, -2}));

  Tensor broadcast = device_tensor({value, value}, DType::float64, device);
  communicator.broadcast(broadcast, 1, Stream{})->wait(Stream{});
  EXPECT_EQ(host_values(broadcast), (std::vector<double>{2, 2}));

  Tensor message = device_tensor({7.5f, -0.25f}, DType::float32, device);
  Tensor received = Tensor::empty(Shape{2}, DType::float32, device);
  if (rank == 0) {
    communicator.send(message, 1, Stream{})->wait(Stream{});
  } else {
    communicator.recv(received, 0, Stream{})->wait(Stream{});
    EXPECT_EQ(host_values(received), (std::vector<double>{7.5, -0.25}));
  }
  communicator.barrier();
}

TEST(CudaCommunicator, GlooStagesTwoRanksOnOneGpu) {
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(kLoopback);
  run_ranks(CommunicationBackend::gloo, {Device::cuda(0), Device::cuda(0)},
            [](Communicator& communicator) { check_two_ranks(communicator, Device::cuda(0)); });
}

TEST(CudaCommunicator, GlooOrdersAfterTheCallersStream) {
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device";
  run_ranks(CommunicationBackend::gloo, {Device::cuda(0), Device::cuda(0)}, [](Communicator& communicator) {
    // The input is written on the compute stream right before the operation, with no host wait in between.
    Tensor tensor = Tensor::empty(Shape{1 << 20}, DType::float32, Device::cuda(0));
    Tensor ones = Tensor::from_values(std::vector<float>(size_t(1) << 20, 1.0f), Shape{1 << 20});
    tensor.copy_bytes_from(ones, Stream{});
    auto first = communicator.all_reduce(tensor, ReduceOp::sum, Stream{});
    auto second = communicator.all_reduce(tensor, ReduceOp::sum, Stream{});
    second->wait(Stream{});
    first->wait();
    Tensor host = tensor.to(Device::cpu(), Stream{});
    EXPECT_EQ(host.data_as<float>()[0], 4.0f);
    EXPECT_EQ(host.data_as<float>()[(1 << 20) - 1], 4.0f);
  });
}

TEST(CudaCommunicator, NcclAloneOnOneGpu) {
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device";
  auto communicator = create_communicator(CommunicatorOptions{.backend = CommunicationBackend::nccl,
                                                              .device = Device::cuda(0)});
  EXPECT_EQ(communicator->name(), "world (rank 0)");
  Tensor tensor = device_tensor({1.5f, -2.0f}, DType::bfloat16, Device::cuda(0));
  communicator->all_reduce(tensor, ReduceOp::sum, Stream{})->wait(Stream{});
  EXPECT_EQ(host_values(tensor), (std::vector<double>{1.5, -2.0}));
  Tensor gathered = Tensor::empty(Shape{2}, DType::bfloat16, Device::cuda(0));
  communicator->all_gather(tensor, gathered, Stream{})->wait();
  EXPECT_EQ(host_values(gathered), (std::vector<double>{1.5, -2.0}));
  communicator->barrier();
  std::unique_ptr<Communicator> alone = communicator->split(0, "alone");
  ASSERT_NE(alone, nullptr);
  EXPECT_EQ(alone->name(), "alone (rank 0)");
  alone->all_reduce(tensor, ReduceOp::max, Stream{})->wait();
  EXPECT_EQ(host_values(tensor), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(communicator->split(-1, "nobody"), nullptr);
}

TEST(CudaCommunicator, NcclBetweenTwoGpus) {
  if (cuda_devices().size() < 2) GTEST_SKIP() << "fewer than two CUDA devices";
  run_ranks(CommunicationBackend::nccl, {Device::cuda(0), Device::cuda(1)}, [](Communicator& communicator) {
    check_two_ranks(communicator, Device::cuda(communicator.rank()));
  });
}

}  // namespace
}  // namespace fast_llm::distributed
