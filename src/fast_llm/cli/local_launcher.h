// `fast-llm train gpt --nproc-per-node N ...`: one distributed job of N processes on this machine, for users without
// torchrun (which needs Python). The launcher runs this same program N times with the variables torchrun would set
// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT whose successor, where
// rank 0 serves the rendezvous under torchrun's variables, is free too), and supervises them:
//   - the processes' output goes straight to the terminal (log lines carry the rank);
//   - SIGINT and SIGTERM sent to the launcher are passed on to every process;
//   - when a process fails (non-zero exit, or killed by a signal) the launcher says which rank and how, stops the
//     others (SIGTERM, then SIGKILL after `grace`) and exits non-zero, so no process is left waiting for a dead peer.
// It returns 0 when every process exits 0.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace fast_llm::cli {

struct LocalLaunch {
  int processes = 1;
  std::vector<std::string> arguments;  // of each process, after the program name
  std::chrono::milliseconds grace{10000};
};

int run_local_processes(const LocalLaunch& launch);

}  // namespace fast_llm::cli
