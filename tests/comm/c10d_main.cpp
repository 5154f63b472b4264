// SPDX-License-Identifier: Apache-2.0
// doctest over N local processes for the c10d tests (no mpirun: a c10d trainer starts its own ranks).
//
// `<test> --ranks N [doctest options]` is the launcher: it starts N copies of itself with
// TEQUANT_C10D_RANK / _SIZE / _STORE set (the store is a FileStore in a fresh temporary directory),
// waits for them with a deadline, kills the ones it started when the deadline passes, and fails unless
// every rank exited 0. A copy with TEQUANT_C10D_RANK set is a rank and runs the test cases; every rank
// runs every case in the same order, so their collectives match.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

int run_rank(int argc, char** argv, bool quiet) {
  doctest::Context context(argc, argv);
  if (quiet) context.setOption("no-intro", true);
  return context.run() == 0 ? 0 : 1;
}

int launch(int ranks, int deadline_s, int argc, char** argv) {
  char dir_template[] = "/tmp/tequant-c10d-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("tequant c10d tests: mkdtemp");
    return 2;
  }
  const std::string dir = dir_template;
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);

  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> env_strings{"TEQUANT_C10D_RANK=" + std::to_string(r),
                                         "TEQUANT_C10D_SIZE=" + std::to_string(ranks),
                                         "TEQUANT_C10D_STORE=" + dir + "/store"};
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
    for (auto& s : env_strings) env.push_back(s.data());
    env.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args.data(), env.data()) != 0) {
      std::perror("tequant c10d tests: posix_spawn");
      for (pid_t p : pids) kill(p, SIGKILL);
      break;
    }
    pids.push_back(pid);
  }

  int failed = static_cast<int>(ranks - pids.size());
  std::vector<bool> done(pids.size(), false);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
  // After a rank fails, its peers may wait on it until their time-outs: give them a short grace only.
  const auto grace = std::chrono::seconds(20);
  for (std::size_t left = pids.size(); left > 0;) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      done[i] = true;
      --left;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ++failed;
        deadline = std::min(deadline, std::chrono::steady_clock::now() + grace);
        std::fprintf(stderr, "tequant c10d tests: rank %zu %s %d\n", i, WIFEXITED(status) ? "exited with" : "killed by signal",
                     WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "tequant c10d tests: %zu rank(s) still running at the deadline: killed\n", left);
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          ++failed;
        }
      break;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (failed != 0) std::fprintf(stderr, "tequant c10d tests: %d of %d rank(s) failed\n", failed, ranks);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* rank = std::getenv("TEQUANT_C10D_RANK"); rank != nullptr)
    return run_rank(argc, argv, std::string(rank) != "0");
  int ranks = 2, deadline_s = 240;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc)
      ranks = std::atoi(argv[++i]);
    else if (a == "--deadline" && i + 1 < argc)
      deadline_s = std::atoi(argv[++i]);
    else
      rest.push_back(argv[i]);
  }
  if (ranks < 1) {
    std::fprintf(stderr, "tequant c10d tests: --ranks must be at least 1\n");
    return 2;
  }
  return launch(ranks, deadline_s, static_cast<int>(rest.size()), rest.data());
}
