// A queue of helper runs served by long-lived threads (see worker_pool.h).
#include "fast_llm/tokenizer/worker_pool.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace fast_llm::tokenizer {
namespace {

class WorkerPool {
 public:
  ~WorkerPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  void run(int helpers, const std::function<void()>& task) {
    std::mutex done_mutex;
    std::condition_variable done;
    int running = helpers;
    {
      std::lock_guard lock(mutex_);
      while (static_cast<int>(threads_.size()) < helpers) threads_.emplace_back([this] { serve(); });
      for (int i = 0; i < helpers; ++i) {
        queue_.push_back([&] {
          task();
          std::lock_guard done_lock(done_mutex);
          if (--running == 0) done.notify_one();
        });
      }
    }
    wake_.notify_all();
    task();
    std::unique_lock done_lock(done_mutex);
    done.wait(done_lock, [&] { return running == 0; });
  }

 private:
  void serve() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

}  // namespace

void run_on_workers(int helpers, const std::function<void()>& task) {
  static WorkerPool pool;
  if (helpers <= 0) {
    task();
    return;
  }
  pool.run(helpers, task);
}

}  // namespace fast_llm::tokenizer
