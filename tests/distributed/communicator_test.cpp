// Tests of the Gloo communicator on CPU tensors: 1 to 4 ranks as threads of this process, each with its own
// communicator on one in-memory store, over loopback. Every result is checked against values computed here by plain
// loops over the ranks' inputs; the fault cases (a rank that never joins an operation, a peer that goes away) assert
// an error naming the operation and the group within a generous bound.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "distributed/memory_store.h"
#include "fast_llm/distributed/communicator.h"

namespace fast_llm::distributed {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Loopback is the only network of the test machines.
const bool kLoopback = [] { return setenv("FAST_LLM_GLOO_INTERFACE", "127.0.0.1", 1) == 0; }();

constexpr milliseconds kTimeout = seconds(60);

CommunicatorOptions world_options(int rank, int size, std::shared_ptr<Store> store, milliseconds timeout = kTimeout,
                                  const std::string& name = "world") {
  return CommunicatorOptions{.backend = CommunicationBackend::gloo,
                             .device = Device::cpu(),
                             .rank = rank,
                             .size = size,
                             .store = std::move(store),
                             .timeout = timeout,
                             .name = name};
}

// Runs `body` on `size` threads, one rank each, every rank with its communicator on one store. An exception on a rank
// is a failure naming the rank.
void run_ranks(int size, const std::function<void(Communicator&)>& body, milliseconds timeout = kTimeout) {
  auto store = std::make_shared<test::MemoryStore>();
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        std::unique_ptr<Communicator> communicator = create_communicator(world_options(rank, size, store, timeout));
        body(*communicator);
      } catch (const std::exception& error) {
        errors[size_t(rank)] = error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(errors[size_t(rank)], "") << "rank " << rank << " of " << size;
}

Tensor tensor_of(const std::vector<float>& values, DType dtype = DType::float32) {
  return Tensor::from_values(values, Shape{int64_t(values.size())}, dtype);
}

std::vector<double> values_of(const Tensor& tensor) {
  std::vector<double> values;
  Tensor flat = tensor.flatten();
  for (int64_t index = 0; index < flat.numel(); ++index) values.push_back(flat.item_as_double(std::array{index}));
  return values;
}

// Rank `rank`'s input for the reductions: mixed signs, small integers (exact in bf16 and fp16, also summed).
float reduction_input(int rank, int index) { return float((index % 2 == 0 ? 1 : -1) * (rank + 1) * (index % 5 + 1)); }

std::vector<double> expected_reduction(ReduceOp op, int size, int count) {
  std::vector<double> expected;
  for (int index = 0; index < count; ++index) {
    double result = reduction_input(0, index);
    for (int rank = 1; rank < size; ++rank) {
      double value = reduction_input(rank, index);
      result = op == ReduceOp::sum ? result + value : op == ReduceOp::max ? std::max(result, value)
                                                                          : std::min(result, value);
    }
    expected.push_back(result);
  }
  return expected;
}

const std::vector<DType> kReducibleDtypes = {DType::float32, DType::float64, DType::bfloat16,
                                             DType::float16, DType::int32,   DType::int64};
const std::vector<ReduceOp> kReduceOps = {ReduceOp::sum, ReduceOp::max, ReduceOp::min};

TEST(GlooCommunicator, AllReduceEveryDtypeAndOp) {
  for (int size = 1; size <= 4; ++size) {
    run_ranks(size, [&](Communicator& communicator) {
      EXPECT_EQ(communicator.size(), size);
      constexpr int kCount = 13;  // not a multiple of any group size: uneven ring segments
      for (DType dtype : kReducibleDtypes) {
        for (ReduceOp op : kReduceOps) {
          std::vector<float> input;
          for (int index = 0; index < kCount; ++index) input.push_back(reduction_input(communicator.rank(), index));
          Tensor tensor = tensor_of(input, dtype);
          communicator.all_reduce(tensor, op, Stream{})->wait();
          EXPECT_EQ(values_of(tensor), expected_reduction(op, size, kCount))
              << dtype_name(dtype) << " op " << int(op) << " size " << size;
        }
      }
    });
  }
}

TEST(GlooCommunicator, AllReduceOfManySegments) {
  // 300000 float32 values: more than Gloo's 1 MiB segment, so the ring runs several rounds.
  constexpr int64_t kCount = 300000;
  run_ranks(3, [&](Communicator& communicator) {
    Tensor tensor = Tensor::empty(Shape{kCount}, DType::float32);
    float* values = tensor.data_as<float>();
    for (int64_t index = 0; index < kCount; ++index) values[index] = float(communicator.rank() * 1000 + index % 7);
    communicator.all_reduce(tensor, ReduceOp::sum, Stream{})->wait();
    for (int64_t index = 0; index < kCount; ++index)
      ASSERT_EQ(values[index], float(3000 + 3 * (index % 7))) << "element " << index;
  });
}

TEST(GlooCommunicator, Int64ReductionsKeepSixtyFourBits) {
  run_ranks(2, [&](Communicator& communicator) {
    Tensor tensor = Tensor::empty(Shape{2}, DType::int64);
    const int64_t big = int64_t(1) << 40;
    tensor.data_as<int64_t>()[0] = big + communicator.rank();
    tensor.data_as<int64_t>()[1] = -big * (communicator.rank() + 1);
    communicator.all_reduce(tensor, ReduceOp::sum, Stream{})->wait();
    EXPECT_EQ(tensor.data_as<int64_t>()[0], 2 * big + 1);
    EXPECT_EQ(tensor.data_as<int64_t>()[1], -3 * big);
  });
}

TEST(GlooCommunicator, HalfPrecisionSumsAccumulateInFloat32) {
  // 256 + 1 + 1 + 1 = 259, rounded once to bf16 (spacing 2 at 256, ties to even): 260. Rounding after each addition
  // would lose the ones against 256 (256 + 1 rounds back to 256).
  run_ranks(4, [&](Communicator& communicator) {
    Tensor tensor = tensor_of({communicator.rank() == 0 ? 256.0f : 1.0f}, DType::bfloat16);
    communicator.all_reduce(tensor, ReduceOp::sum, Stream{})->wait();
    EXPECT_EQ(values_of(tensor), std::vector<double>{260.0});
  });
}

TEST(GlooCommunicator, MaxAndMinKeepNaN) {
  run_ranks(2, [&](Communicator& communicator) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
      Tensor tensor = tensor_of({communicator.rank() == 0 ? nan : 1.0f, communicator.rank() == 1 ? nan : 2.0f});
      communicator.all_reduce(tensor, op, Stream{})->wait();
      std::vector<double> result = values_of(tensor);
      EXPECT_TRUE(std::isnan(result[0])) << int(op);
      EXPECT_TRUE(std::isnan(result[1])) << int(op);
    }
  });
}

// The infinities that stand for "no value" (a rank without a loss's labels: layers::loss_identity) give way to the
// other ranks' values under max and min, and stay when every rank has none.
TEST(GlooCommunicator, MaxAndMinOfInfinities) {
  run_ranks(2, [&](Communicator& communicator) {
    const double infinity = std::numeric_limits<double>::infinity();
    for (DType dtype : {DType::float64, DType::float32}) {
      const bool first = communicator.rank() == 0;
      Tensor maximum = tensor_of({first ? -float(infinity) : 3.0f, -float(infinity), first ? 0.5f : -4.0f}, dtype);
      communicator.all_reduce(maximum, ReduceOp::max, Stream{})->wait();
      EXPECT_EQ(values_of(maximum), (std::vector<double>{3.0, -infinity, 0.5})) << dtype_name(dtype);
      Tensor minimum = tensor_of({first ? float(infinity) : -2.0f, float(infinity), first ? 0.5f : -4.0f}, dtype);
      communicator.all_reduce(minimum, ReduceOp::min, Stream{})->wait();
      EXPECT_EQ(values_of(minimum), (std::vector<double>{-2.0, infinity, -4.0})) << dtype_name(dtype);
    }
  });
}

TEST(GlooCommunicator, ReduceScatterKeepsThisRanksPart) {
  for (int size = 1; size <= 4; ++size) {
    run_ranks(size, [&](Communicator& communicator) {
      constexpr int kPart = 5;
      const int count = kPart * size;
      for (DType dtype : kReducibleDtypes) {
        for (ReduceOp op : kReduceOps) {
          std::vector<float> input;
          for (int index = 0; index < count; ++index) input.push_back(reduction_input(communicator.rank(), index));
          Tensor output = Tensor::empty(Shape{kPart}, dtype);
          communicator.reduce_scatter(tensor_of(input, dtype), output, op, Stream{})->wait();
          std::vector<double> full = expected_reduction(op, size, count);
          std::vector<double> expected(full.begin() + communicator.rank() * kPart,
                                       full.begin() + (communicator.rank() + 1) * kPart);
          EXPECT_EQ(values_of(output), expected) << dtype_name(dtype) << " op " << int(op) << " size " << size;
        }
      }
    });
  }
}

TEST(GlooCommunicator, AllGatherConcatenatesInRankOrder) {
  for (int size = 1; size <= 4; ++size) {
    run_ranks(size, [&](Communicator& communicator) {
      for (DType dtype : {DType::float32, DType::bfloat16, DType::int64, DType::uint8}) {
        // Three values per rank: an odd number of bytes for uint8, so the ring's half-chunks differ.
        const auto rank = float(communicator.rank());
        Tensor input = tensor_of({rank * 10, rank * 10 + 1, rank * 10 + 2}, dtype);
        Tensor output = Tensor::empty(Shape{size, 3}, dtype);
        communicator.all_gather(input, output, Stream{})->wait();
        std::vector<double> expected;
        for (int peer = 0; peer < size; ++peer)
          for (int index = 0; index < 3; ++index) expected.push_back(peer * 10 + index);
        EXPECT_EQ(values_of(output), expected) << dtype_name(dtype) << " size " << size;
      }
    });
  }
}

TEST(GlooCommunicator, BroadcastFromEveryRoot) {
  for (int size = 1; size <= 4; ++size) {
    run_ranks(size, [&](Communicator& communicator) {
      for (int root = 0; root < size; ++root) {
        const auto rank = float(communicator.rank());
        Tensor tensor = tensor_of({rank, rank + 0.5f, -rank}, DType::float64);
        communicator.broadcast(tensor, root, Stream{})->wait();
        EXPECT_EQ(values_of(tensor), (std::vector<double>{double(root), root + 0.5, -double(root)}))
            << "root " << root << " size " << size;
      }
    });
  }
}

TEST(GlooCommunicator, SendAndRecvMatchInOrderPerPeer) {
  for (int size = 2; size <= 4; ++size) {
    run_ranks(size, [&](Communicator& communicator) {
      // Rank 0 sends three messages to every other rank without waiting; each answers with its rank.
      if (communicator.rank() == 0) {
        std::vector<Tensor> messages;
        std::vector<std::unique_ptr<Work>> sends;
        for (int peer = 1; peer < size; ++peer) {
          for (int message = 0; message < 3; ++message) {
            messages.push_back(tensor_of({float(peer * 100 + message), float(message)}));
            sends.push_back(communicator.send(messages.back(), peer, Stream{}));
          }
        }
        for (auto& send : sends) send->wait();
        for (int peer = 1; peer < size; ++peer) {
          Tensor answer = Tensor::empty(Shape{1}, DType::int32);
          communicator.recv(answer, peer, Stream{})->wait();
          EXPECT_EQ(values_of(answer), std::vector<double>{double(peer)});
        }
      } else {
        std::vector<Tensor> received;
        std::vector<std::unique_ptr<Work>> recvs;
        for (int message = 0; message < 3; ++message) {
          received.push_back(Tensor::empty(Shape{2}, DType::float32));
          recvs.push_back(communicator.recv(received.back(), 0, Stream{}));
        }
        for (int message = 2; message >= 0; --message) recvs[size_t(message)]->wait();
        for (int message = 0; message < 3; ++message) {
          EXPECT_EQ(values_of(received[size_t(message)]),
                    (std::vector<double>{double(communicator.rank() * 100 + message), double(message)}));
        }
        Tensor answer = tensor_of({float(communicator.rank())}, DType::int32);
        communicator.send(answer, 0, Stream{})->wait();
      }
    });
  }
}

TEST(GlooCommunicator, SendAndRecvAroundARing) {
  run_ranks(3, [&](Communicator& communicator) {
    const int rank = communicator.rank();
    const int next = (rank + 1) % 3;
    const int previous = (rank + 2) % 3;
    Tensor outgoing = tensor_of({float(rank)}, DType::float16);
    Tensor incoming = Tensor::empty(Shape{1}, DType::float16);
    // Sends complete when the peer has posted its recv: even ranks send first, odd ranks receive first.
    if (rank % 2 == 0) {
      auto send = communicator.send(outgoing, next, Stream{});
      auto recv = communicator.recv(incoming, previous, Stream{});
      send->wait();
      recv->wait();
    } else {
      auto recv = communicator.recv(incoming, previous, Stream{});
      auto send = communicator.send(outgoing, next, Stream{});
      recv->wait();
      send->wait();
    }
    EXPECT_EQ(values_of(incoming), std::vector<double>{double(previous)});
  });
}

TEST(GlooCommunicator, BarrierWaitsForEveryRank) {
  for (int size = 1; size <= 4; ++size) {
    std::atomic<int> arrived = 0;
    run_ranks(size, [&](Communicator& communicator) {
      // The last rank arrives late: nobody may leave the barrier before it has counted itself.
      if (communicator.rank() == size - 1) std::this_thread::sleep_for(milliseconds(200));
      ++arrived;
      communicator.barrier();
      EXPECT_EQ(arrived.load(), size);
    });
  }
}

TEST(GlooCommunicator, AsynchronousOperationsCompleteInIssueOrder) {
  for (int size = 1; size <= 4; ++size) {
    run_ranks(size, [&](Communicator& communicator) {
      const int rank = communicator.rank();
      Tensor summed = tensor_of({float(rank + 1), 1.0f});
      Tensor broadcast = tensor_of({float(rank)}, DType::int32);
      Tensor gathered = Tensor::empty(Shape{size}, DType::int32);
      std::vector<std::unique_ptr<Work>> works;
      // The second all_reduce sums the first one's result: it must run after it, on the same tensor.
      works.push_back(communicator.all_reduce(summed, ReduceOp::sum, Stream{}));
      works.push_back(communicator.all_reduce(summed, ReduceOp::sum, Stream{}));
      // The gather reads what the broadcast wrote.
      works.push_back(communicator.broadcast(broadcast, size - 1, Stream{}));
      works.push_back(communicator.all_gather(broadcast, gathered, Stream{}));
      for (auto work = works.rbegin(); work != works.rend(); ++work) (*work)->wait();
      const double first_sum = size * (size + 1) / 2.0;
      EXPECT_EQ(values_of(summed), (std::vector<double>{size * first_sum, double(size * size)}));
      EXPECT_EQ(values_of(broadcast), std::vector<double>{double(size - 1)});
      EXPECT_EQ(values_of(gathered), std::vector<double>(size_t(size), double(size - 1)));
    });
  }
}

TEST(GlooCommunicator, SplitIntoEvenAndOddRanks) {
  run_ranks(4, [&](Communicator& communicator) {
    const int rank = communicator.rank();
    std::unique_ptr<Communicator> group = communicator.split(rank % 2, "data");
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->size(), 2);
    EXPECT_EQ(group->rank(), rank / 2);
    EXPECT_EQ(group->name(), rank % 2 == 0 ? "data (ranks 0, 2)" : "data (ranks 1, 3)");
    Tensor tensor = tensor_of({float(rank)}, DType::int32);
    group->all_reduce(tensor, ReduceOp::sum, Stream{})->wait();
    EXPECT_EQ(values_of(tensor), std::vector<double>{rank % 2 == 0 ? 2.0 : 4.0});

    // A split of the split: every rank alone, named by its world rank.
    std::unique_ptr<Communicator> single = group->split(group->rank(), "single");
    ASSERT_NE(single, nullptr);
    EXPECT_EQ(single->size(), 1);
    EXPECT_EQ(single->name(), "single (rank " + std::to_string(rank) + ")");

    // The parent still works, also after its groups.
    Tensor world = tensor_of({float(rank)});
    communicator.all_reduce(world, ReduceOp::sum, Stream{})->wait();
    EXPECT_EQ(values_of(world), std::vector<double>{6.0});
  });
}

TEST(GlooCommunicator, SplitWithANegativeColorLeavesARankOut) {
  run_ranks(4, [&](Communicator& communicator) {
    const int rank = communicator.rank();
    // Colors given out of rank order: the group is ranked in the parent's order all the same.
    const int colors[] = {7, 7, 7, -1};
    std::unique_ptr<Communicator> group = communicator.split(colors[rank], "first three");
    if (rank == 3) {
      EXPECT_EQ(group, nullptr);
    } else {
      ASSERT_NE(group, nullptr);
      EXPECT_EQ(group->size(), 3);
      EXPECT_EQ(group->rank(), rank);
      EXPECT_EQ(group->name(), "first three (ranks 0-2)");
      Tensor tensor = tensor_of({float(rank + 1)});
      group->all_reduce(tensor, ReduceOp::max, Stream{})->wait();
      EXPECT_EQ(values_of(tensor), std::vector<double>{3.0});
    }
    // Two groups whose members interleave: ranks 1 and 2 (color 5), ranks 0 and 3 (color 3).
    std::unique_ptr<Communicator> pair = communicator.split(rank == 1 || rank == 2 ? 5 : 3, "pair");
    ASSERT_NE(pair, nullptr);
    EXPECT_EQ(pair->name(), rank == 1 || rank == 2 ? "pair (ranks 1-2)" : "pair (ranks 0, 3)");
    Tensor tensor = tensor_of({float(rank)});
    pair->broadcast(tensor, 1, Stream{})->wait();
    EXPECT_EQ(values_of(tensor), std::vector<double>{rank == 1 || rank == 2 ? 2.0 : 3.0});
  });
}

TEST(GlooCommunicator, SizeOneWithoutAStore) {
  std::unique_ptr<Communicator> communicator = create_communicator(CommunicatorOptions{});
  EXPECT_EQ(communicator->rank(), 0);
  EXPECT_EQ(communicator->size(), 1);
  EXPECT_EQ(communicator->name(), "world (rank 0)");
  Tensor tensor = tensor_of({1.5f, -2.0f}, DType::bfloat16);
  communicator->all_reduce(tensor, ReduceOp::sum, Stream{})->wait();
  EXPECT_EQ(values_of(tensor), (std::vector<double>{1.5, -2.0}));
  Tensor scattered = Tensor::empty(Shape{2}, DType::bfloat16);
  communicator->reduce_scatter(tensor, scattered, ReduceOp::max, Stream{})->wait();
  EXPECT_EQ(values_of(scattered), (std::vector<double>{1.5, -2.0}));
  Tensor gathered = Tensor::empty(Shape{2}, DType::bfloat16);
  communicator->all_gather(tensor, gathered, Stream{})->wait();
  EXPECT_EQ(values_of(gathered), (std::vector<double>{1.5, -2.0}));
  communicator->broadcast(tensor, 0, Stream{})->wait();
  EXPECT_EQ(values_of(tensor), (std::vector<double>{1.5, -2.0}));
  communicator->barrier();
  EXPECT_THROW(communicator->send(tensor, 0, Stream{}), Error);
  EXPECT_THROW(communicator->broadcast(tensor, 1, Stream{}), Error);
  std::unique_ptr<Communicator> alone = communicator->split(3, "alone");
  ASSERT_NE(alone, nullptr);
  EXPECT_EQ(alone->name(), "alone (rank 0)");
  alone->all_reduce(tensor, ReduceOp::min, Stream{})->wait();
  EXPECT_EQ(values_of(tensor), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(communicator->split(-1, "nobody"), nullptr);
}

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(GlooCommunicator, ARankThatNeverJoinsTimesOutWithTheOperationNamed) {
  auto store = std::make_shared<test::MemoryStore>();
  constexpr milliseconds kShortTimeout = seconds(2);
  std::promise<void> failed;
  std::shared_future<void> failed_future = failed.get_future().share();
  std::string setup_error;
  // Rank 1 connects, then issues nothing until rank 0 has given up.
  std::thread idle([&] {
    try {
      auto communicator = create_communicator(world_options(1, 2, store, kShortTimeout));
      failed_future.wait_for(seconds(300));
    } catch (const std::exception& error) {
      setup_error = error.what();
    }
  });
  std::string timeout_error;
  std::string later_error;
  std::chrono::steady_clock::duration elapsed{};
  try {
    auto communicator = create_communicator(world_options(0, 2, store, kShortTimeout));
    Tensor tensor = tensor_of({1.0f});
    const auto start = std::chrono::steady_clock::now();
    timeout_error = error_of([&] { communicator->all_reduce(tensor, ReduceOp::sum, Stream{})->wait(); });
    elapsed = std::chrono::steady_clock::now() - start;
    // The group is broken: the next operation fails at once, naming the first failure.
    later_error = error_of([&] { communicator->barrier(); });
  } catch (const std::exception& error) {
    setup_error = error.what();
  }
  failed.set_value();
  idle.join();
  EXPECT_EQ(setup_error, "");
  EXPECT_NE(timeout_error.find("[distributed] all_reduce (sum) on world (ranks 0-1) failed on rank 0"),
            std::string::npos)
      << timeout_error;
  EXPECT_GE(elapsed, kShortTimeout);
  EXPECT_LT(elapsed, seconds(120));
  EXPECT_NE(later_error.find("barrier on world (ranks 0-1) not run: an earlier operation failed (all_reduce"),
            std::string::npos)
      << later_error;
}

TEST(GlooCommunicator, APeerThatGoesAwayFailsThePendingOperation) {
  auto store = std::make_shared<test::MemoryStore>();
  std::string setup_error;
  std::thread leaving([&] {
    try {
      auto communicator = create_communicator(world_options(1, 2, store));
      communicator->barrier();
    } catch (const std::exception& error) {
      setup_error = error.what();
    }
  });
  std::string recv_error;
  std::chrono::steady_clock::duration elapsed{};
  try {
    auto communicator = create_communicator(world_options(0, 2, store));
    communicator->barrier();
    Tensor tensor = Tensor::empty(Shape{4}, DType::float32);
    const auto start = std::chrono::steady_clock::now();
    recv_error = error_of([&] { communicator->recv(tensor, 1, Stream{})->wait(); });
    elapsed = std::chrono::steady_clock::now() - start;
  } catch (const std::exception& error) {
    setup_error = error.what();
  }
  leaving.join();
  EXPECT_EQ(setup_error, "");
  EXPECT_NE(recv_error.find("recv (from rank 1) on world (ranks 0-1) failed on rank 0"), std::string::npos)
      << recv_error;
  // Well before the 60 s timeout: the closed connection ends the wait, not the clock.
  EXPECT_LT(elapsed, seconds(45));
}

TEST(GlooCommunicator, OptionsAndArgumentsAreChecked) {
  EXPECT_THROW(create_communicator(world_options(0, 2, nullptr)), Error);  // two ranks, no store
  EXPECT_THROW(create_communicator(world_options(2, 2, std::make_shared<test::MemoryStore>())), Error);
  EXPECT_THROW(create_communicator(world_options(0, 1, nullptr, milliseconds(0))), Error);
  EXPECT_THROW(create_communicator(world_options(0, 1, nullptr, kTimeout, "")), Error);
  CommunicatorOptions nccl_on_cpu;
  nccl_on_cpu.backend = CommunicationBackend::nccl;
  EXPECT_NE(error_of([&] { create_communicator(nccl_on_cpu); }).find("NCCL moves CUDA tensors"), std::string::npos);
  if (!cuda_compiled()) {
    CommunicatorOptions nccl = nccl_on_cpu;
    nccl.device = Device::cuda(0);
    EXPECT_NE(error_of([&] { create_communicator(nccl); }).find("NCCL needs the CUDA backend"), std::string::npos);
  }

  std::unique_ptr<Communicator> communicator = create_communicator(CommunicatorOptions{});
  Tensor matrix = Tensor::empty(Shape{2, 3}, DType::float32);
  Tensor gathered = Tensor::empty(Shape{5}, DType::float32);
  EXPECT_NE(error_of([&] { communicator->all_gather(matrix, gathered, Stream{}); }).find("all_gather on world"),
            std::string::npos);
  Tensor transposed = matrix.transpose(0, 1);
  EXPECT_NE(error_of([&] { communicator->all_reduce(transposed, ReduceOp::sum, Stream{}); }).find("contiguous"),
            std::string::npos);
  Tensor bytes = Tensor::empty(Shape{4}, DType::uint8);
  EXPECT_NE(error_of([&] { communicator->all_reduce(bytes, ReduceOp::sum, Stream{}); }).find("cannot reduce uint8"),
            std::string::npos);
  Tensor doubles = Tensor::empty(Shape{6}, DType::float64);
  EXPECT_THROW(communicator->reduce_scatter(matrix, doubles, ReduceOp::sum, Stream{}), Error);
}

TEST(GlooCommunicator, TwoGroupsOfOneNameOnOneStoreAreRefused) {
  auto store = std::make_shared<test::MemoryStore>();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto first = create_communicator(world_options(rank, 2, store));
        errors[size_t(rank)] = error_of([&] { create_communicator(world_options(rank, 2, store)); });
      } catch (const std::exception& error) {
        errors[size_t(rank)] = std::string("first group: ") + error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& error : errors)
    EXPECT_NE(error.find("a Gloo group named 'world' was already created on memory store"), std::string::npos)
        << error;
}

TEST(GlooCommunicator, AnUnknownInterfaceIsAnError) {
  setenv("FAST_LLM_GLOO_INTERFACE", "no-such-interface0", 1);
  auto store = std::make_shared<test::MemoryStore>();
  const std::string error = error_of([&] { create_communicator(world_options(0, 2, store)); });
  setenv("FAST_LLM_GLOO_INTERFACE", "127.0.0.1", 1);
  EXPECT_NE(error.find("FAST_LLM_GLOO_INTERFACE=no-such-interface0"), std::string::npos) << error;
  EXPECT_TRUE(kLoopback);
}

}  // namespace
}  // namespace fast_llm::distributed
