// OperationQueue: a deque under a mutex, one worker thread, and per operation a completion flag with the exception it
// ended with (see operation_queue.h).
#include "fast_llm/distributed/operation_queue.h"

#include <exception>

namespace fast_llm::distributed::detail {

struct OperationQueue::Completion {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::exception_ptr error;
};

class OperationQueue::HostWork final : public Work {
 public:
  explicit HostWork(std::shared_ptr<Completion> completion) : completion_(std::move(completion)) {}

  void wait(Stream stream) override { wait(); }

  void wait() override {
    std::unique_lock lock(completion_->mutex);
    completion_->finished.wait(lock, [&] { return completion_->done; });
    if (completion_->error) std::rethrow_exception(completion_->error);
  }

 private:
  std::shared_ptr<Completion> completion_;
};

OperationQueue::OperationQueue() : worker_([this] { run(); }) {}

OperationQueue::~OperationQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_one();
  worker_.join();
}

std::unique_ptr<Work> OperationQueue::submit(std::function<void()> operation) {
  auto completion = std::make_shared<Completion>();
  {
    std::lock_guard lock(mutex_);
    FLM_ASSERT(!stopping_, "an operation submitted to a communicator being destroyed");
    items_.push_back(Item{std::move(operation), completion});
  }
  queued_.notify_one();
  return std::make_unique<HostWork>(std::move(completion));
}

void OperationQueue::run() {
  while (true) {
    Item item;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !items_.empty(); });
      if (items_.empty()) return;  // stopping, and nothing left to run
      item = std::move(items_.front());
      items_.pop_front();
    }
    std::exception_ptr error;
    try {
      item.operation();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(item.completion->mutex);
      item.completion->done = true;
      item.completion->error = error;
    }
    item.completion->finished.notify_all();
  }
}

}  // namespace fast_llm::distributed::detail
