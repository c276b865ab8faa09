// A file descriptor closed by its owner (internal to the distributed library): the TCP store's client socket, the
// file store's lock files. Closing also on the way out of a constructor or a function that throws.
#pragma once

#include <unistd.h>

namespace fast_llm::distributed {

class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int descriptor) : descriptor_(descriptor) {}
  ~Descriptor() { reset(-1); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  int get() const { return descriptor_; }
  bool valid() const { return descriptor_ >= 0; }
  // Closes the current descriptor, if any, and owns `descriptor` instead.
  void reset(int descriptor) {
    if (descriptor_ >= 0) ::close(descriptor_);
    descriptor_ = descriptor;
  }

 private:
  int descriptor_ = -1;
};

}  // namespace fast_llm::distributed
