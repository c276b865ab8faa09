// The process's tokenizing threads: encode_batch runs on them so that they, and the per-thread word caches of the BPE
// model (bpe_model.h), outlive one call; a pool created per call would start every batch with cold caches. Threads are
// started on first need, up to the most any call asked for, and joined at exit.
#pragma once

#include <functional>

namespace fast_llm::tokenizer {

// Runs `task` on the calling thread and on `helpers` pool threads at once, and returns when all have finished. `task`
// must not throw (encode_batch catches inside it). Calls from several threads queue their helpers in turn; the
// calling thread always works, so every call progresses.
void run_on_workers(int helpers, const std::function<void()>& task);

}  // namespace fast_llm::tokenizer
