// The Gloo engine's asynchrony (private to the distributed library): one worker thread per communicator runs its
// operations one at a time, in the order they were submitted, so that the operations of a group meet in the same order
// on every rank without the caller's thread blocking. The Work of an operation is a host wait: `wait()` returns once
// the operation has run and rethrows what it threw, every time it is called (the stream overload waits on the host
// too: the operation's device copies, if any, have completed when it returns).
//
// Destruction runs what is still queued (each operation bounds itself by the communicator's timeout), then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "fast_llm/distributed/communicator.h"

namespace fast_llm::distributed::detail {

class OperationQueue {
 public:
  OperationQueue();
  ~OperationQueue();
  OperationQueue(const OperationQueue&) = delete;
  OperationQueue& operator=(const OperationQueue&) = delete;

  std::unique_ptr<Work> submit(std::function<void()> operation);

 private:
  struct Completion;
  struct Item {
    std::function<void()> operation;
    std::shared_ptr<Completion> completion;
  };
  class HostWork;

  void run();

  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Item> items_;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once the members above exist
};

}  // namespace fast_llm::distributed::detail
