// SPDX-License-Identifier: Apache-2.0
// Starting and connecting the ranks of the c10d/Gloo examples (c10d_data_parallel, libtorch_gpt
// --ranks): N local copies of the program that meet through a FileStore (or a TCPStore that the
// launcher serves), or one rank of a job started elsewhere, torchrun-style, whose rank 0 serves a
// TCPStore at an address every rank knows. Linux (posix_spawn of /proc/self/exe, prctl).
// Needs USE_C10D_GLOO (as libtorch was built) and Gloo's library.
#pragma once
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace c10d_ranks {

/// Where the ranks meet and how long a collective may wait for a peer.
struct rendezvous {
  int rank = 0, world = 1;
  std::string file;                 // a FileStore at this path (ranks on one machine), or else
  std::string host;                 // a TCPStore at host:port
  std::uint16_t port = 0;
  bool serve_store = false;         // this process serves the TCPStore (rank 0 of a torchrun-style job)
  std::string address;              // this rank's Gloo address; empty: 127.0.0.1 with a FileStore, the
                                    // host name's address (or $GLOO_SOCKET_IFNAME's) with a TCPStore
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

/// The first line of an exception's message (c10::Error appends a C++ backtrace after it).
inline std::string first_line(const std::exception& e) {
  std::string what = e.what();
  if (const auto eol = what.find('\n'); eol != std::string::npos) what.resize(eol);
  return what;
}

/// "tcp://HOST:PORT" -> host and port; throws std::invalid_argument saying what is wrong.
inline void parse_tcp(const std::string& url, rendezvous& r) {
  const std::string scheme = "tcp://";
  const auto colon = url.rfind(':');
  if (url.rfind(scheme, 0) != 0 || colon == std::string::npos || colon <= scheme.size())
    throw std::invalid_argument("--rendezvous needs tcp://HOST:PORT, got '" + url + "'");
  const std::string port = url.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 1 || p > 65535)
    throw std::invalid_argument("--rendezvous: port must be in [1, 65535], got '" + port + "'");
  r.host = url.substr(scheme.size(), colon - scheme.size());
  r.port = static_cast<std::uint16_t>(p);
}

/// The rendezvous of a rank that launch() started (its environment says so), or nothing.
inline std::optional<rendezvous> spawned_rank(std::chrono::milliseconds timeout) {
  const char* rank = std::getenv("TEQUANT_EXAMPLE_RANK");
  const char* size = std::getenv("TEQUANT_EXAMPLE_SIZE");
  const char* store = std::getenv("TEQUANT_EXAMPLE_STORE");
  if (rank == nullptr || size == nullptr || store == nullptr) return std::nullopt;
  // A rank must not outlive its launcher (killed by a test's time-out, say).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  rendezvous r;
  r.rank = std::atoi(rank);
  r.world = std::atoi(size);
  r.timeout = timeout;
  r.address = "127.0.0.1";
  if (std::string(store).rfind("tcp://", 0) == 0)
    parse_tcp(store, r);
  else
    r.file = store;
  return r;
}

/// The store, then a Gloo process group over it whose collectives fail after r.timeout, then a
/// barrier (so that no rank tears the group down while a peer is still connecting).
inline c10::intrusive_ptr<c10d::ProcessGroup> connect(const rendezvous& r) {
  c10::intrusive_ptr<c10d::Store> store;
  if (!r.file.empty()) {
    store = c10::make_intrusive<c10d::FileStore>(r.file, r.world);
  } else {
    c10d::TCPStoreOptions so;
    so.port = r.port;
    so.isServer = r.serve_store;
    so.numWorkers = static_cast<std::size_t>(r.world);
    so.waitWorkers = false;  // the process group's rendezvous waits for every rank itself
    so.timeout = r.timeout;
    store = c10::make_intrusive<c10d::TCPStore>(r.host, so);
  }
  store->setTimeout(r.timeout);
  auto options = c10d::ProcessGroupGloo::Options::create(r.timeout);
  if (!r.address.empty())
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(r.address));
  else if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr)
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r.rank, r.world, options);
  pg->barrier()->wait();
  return pg;
}

/// A one-rank group (a reference run in one process that still needs a c10d_comm).
inline c10::intrusive_ptr<c10d::ProcessGroup> solo_group(const std::string& dir) {
  rendezvous r;
  r.file = dir + "/solo-store";
  r.address = "127.0.0.1";
  return connect(r);
}

/// allreduce of one tensor; a failure (time-out, lost peer) becomes a std::runtime_error that names
/// `what`, this rank and the transport's message.
inline void all_reduce(c10d::ProcessGroup& pg, at::Tensor& t, c10d::ReduceOp::RedOpType op, const char* what) {
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  try {
    pg.allreduce(v, o)->wait();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(what) + " (allreduce, rank " + std::to_string(pg.getRank()) + " of " +
                             std::to_string(pg.getSize()) + ", " + pg.getBackendName() + ") failed: " + first_line(e));
  }
}

/// Every rank's `mine` (the same length on every rank), rank after rank: one SUM allreduce of a
/// buffer where each rank fills only its own part (adding zeros is exact, for floats and integers).
inline at::Tensor all_gather(c10d::ProcessGroup& pg, const at::Tensor& mine, const char* what) {
  const std::int64_t n = mine.numel();
  at::Tensor all = at::zeros({pg.getSize() * n}, mine.options());
  all.narrow(0, pg.getRank() * n, n).copy_(mine.reshape({-1}));
  all_reduce(pg, all, c10d::ReduceOp::SUM, what);
  return all.view({pg.getSize(), n});
}

/// A fresh temporary directory, removed with this object.
class temp_dir {
 public:
  temp_dir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tequant-c10d-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
    path_ = tmpl;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

enum class store_kind { file, tcp };

/// Starts `ranks` copies of this program (same argv; the environment tells each its rank and the
/// store) and waits for them. 0 when every rank exits with 0. When a rank fails, the others get
/// `grace` to fail too (their next collective errs at once when a peer's sockets close, or after the
/// process group's time-out when the peer hangs); then they are killed, so the job never hangs.
/// With store_kind::tcp the launcher serves a TCPStore on a free port of 127.0.0.1, as torchrun's
/// agent does.
inline int launch(int ranks, char** argv, const char* program, store_kind kind, std::chrono::milliseconds grace) {
  temp_dir dir;
  c10::intrusive_ptr<c10d::TCPStore> server;
  std::string store = dir.path() + "/store";
  if (kind == store_kind::tcp) {
    c10d::TCPStoreOptions so;
    so.port = 0;  // any free port
    so.isServer = true;
    so.waitWorkers = false;
    server = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
    store = "tcp://127.0.0.1:" + std::to_string(server->getPort());
  }
  std::vector<pid_t> pids;
  auto stop_all = [&] {
    for (pid_t p : pids)
      if (p > 0) kill(p, SIGKILL);
    for (pid_t p : pids)
      if (p > 0) waitpid(p, nullptr, 0);
  };
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> extra{"TEQUANT_EXAMPLE_RANK=" + std::to_string(r),
                                   "TEQUANT_EXAMPLE_SIZE=" + std::to_string(ranks), "TEQUANT_EXAMPLE_STORE=" + store};
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e)
      if (std::strncmp(*e, "TEQUANT_EXAMPLE_", 16) != 0) env.push_back(*e);
    for (auto& s : extra) env.push_back(s.data());
    env.push_back(nullptr);
    pid_t pid = 0;
    if (const int err = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, env.data()); err != 0) {
      std::fprintf(stderr, "%s: cannot start rank %d: %s\n", program, r, std::strerror(err));
      stop_all();
      return 2;
    }
    pids.push_back(pid);
  }
  int failed = 0, running = ranks;
  std::optional<std::chrono::steady_clock::time_point> first_failure;
  while (running > 0) {
    for (int r = 0; r < ranks; ++r) {
      if (pids[std::size_t(r)] <= 0) continue;
      int status = 0;
      if (waitpid(pids[std::size_t(r)], &status, WNOHANG) != pids[std::size_t(r)]) continue;
      pids[std::size_t(r)] = 0;
      --running;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      ++failed;
      if (WIFSIGNALED(status))
        std::fprintf(stderr, "%s: rank %d was killed by signal %d (%s)\n", program, r, WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
      else
        std::fprintf(stderr, "%s: rank %d exited with %d\n", program, r, WEXITSTATUS(status));
      if (!first_failure) first_failure = std::chrono::steady_clock::now();
    }
    if (running > 0 && first_failure && std::chrono::steady_clock::now() - *first_failure > grace) {
      for (int r = 0; r < ranks; ++r)
        if (pids[std::size_t(r)] > 0)
          std::fprintf(stderr, "%s: rank %d still running %.0f s after a rank failed: killed\n", program, r,
                       std::chrono::duration<double>(grace).count());
      failed += running;
      stop_all();
      break;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace c10d_ranks
