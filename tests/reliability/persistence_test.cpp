// SPDX-License-Identifier: Apache-2.0
// Persistence: bit-identical resume in a fresh process, crash-safe writes, and one specific error per
// corruption class with the live state untouched.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_error.hpp"
#include "resume_common.hpp"
#include "tequant/persistence/bytes.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/persistence.hpp"
#include "tequant/recipe/current.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using rel::resume_manager;
using model_t = rel::toy_model<resume_manager>;

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("tequant_rel_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

int run_child(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  REQUIRE(::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// A manager with a trained state: k steps of the toy model.
struct trained {
  resume_manager m{rel::resume_params()};
  model_t model{m};
  explicit trained(int k) {
    rel::configure(model);
    for (int i = 0; i < k; ++i) (void)model.step(i);
  }
};

}  // namespace

TEST_CASE("resume in a fresh process: losses, weights and state are bit-identical") {
  temp_dir dir;
  constexpr int k = 6, n = 7;
  trained a(k);
  REQUIRE(a.m.stats().pending);  // autocast_entry: the last backward update waits for the next forward
  const fs::path state = dir.path / "state.tqs", weights = dir.path / "weights.bin", out = dir.path / "out.bin";
  tequant::save_state(a.m, state);
  rel::write_all(weights, a.model.weight_bytes());
  const auto expected = rel::continue_run(a.m, a.model, k, n);

  REQUIRE(run_child({TEQUANT_RESUME_HELPER, state.string(), weights.string(), std::to_string(k), std::to_string(n),
                     out.string()}) == 0);
  const auto got = rel::read_all(out);
  REQUIRE(got.size() == expected.size());
  CHECK(got == expected);
  // The comparison has teeth: a run that starts one step later differs.
  trained b(k + 1);
  CHECK(rel::continue_run(b.m, b.model, k, n) != expected);
}

TEST_CASE("a manager without modules adopts the file's layout; the rebuilt window deque acts identically") {
  trained a(9);
  const auto bytes = tequant::state_bytes(a.m);
  resume_manager fresh(rel::resume_params());
  tequant::load_state(fresh, bytes);
  REQUIRE(fresh.module_count() == 3);
  CHECK(fresh.module_name({2}) == "layer2");
  REQUIRE(fresh.bucket_count() == a.m.bucket_count());
  for (std::uint32_t b = 0; b < fresh.bucket_count(); ++b) {
    CHECK(fresh.bucket(b).owners == a.m.bucket(b).owners);
    auto va = a.m.recipe_state()[b].view(), vf = fresh.recipe_state()[b].view();
    for (std::uint32_t j = 0; j < va.slots; ++j)
      CHECK(tequant::detail::delayed_window_max(va, j) == tequant::detail::delayed_window_max(vf, j));
  }
  CHECK(tequant::state_bytes(fresh) == bytes);
  model_t model(fresh, false);
  rel::configure(model);
  model.w = a.model.w;
  CHECK(rel::continue_run(fresh, model, 9, 6) == rel::continue_run(a.m, a.model, 9, 6));
}

TEST_CASE("streams: records are self-delimiting") {
  trained a(3), b(5);
  std::stringstream ss;
  tequant::save_state(a.m, ss);
  tequant::save_state(b.m, ss);
  resume_manager x(rel::resume_params()), y(rel::resume_params());
  tequant::load_state(x, static_cast<std::istream&>(ss));
  tequant::load_state(y, static_cast<std::istream&>(ss));
  CHECK(tequant::state_bytes(x) == tequant::state_bytes(a.m));
  CHECK(tequant::state_bytes(y) == tequant::state_bytes(b.m));
  std::stringstream cut(ss.str().substr(0, 100));
  CHECK_TEQUANT_ERROR(tequant::load_state(x, static_cast<std::istream&>(cut)), "truncated");
  CHECK(tequant::state_bytes(x) == tequant::state_bytes(a.m));
}

TEST_CASE("every byte of a state file is protected; each corruption class has its own message") {
  trained a(4), victim(2);
  const auto good = tequant::state_bytes(a.m);
  const auto before = tequant::state_bytes(victim.m);
  const std::size_t payload_end = good.size() - 8;
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (std::uint8_t bit : {std::uint8_t{0x01}, std::uint8_t{0x80}}) {
      auto bad = good;
      bad[i] ^= bit;
      const char* expect = i < 8 ? "bad magic" : i < 32 ? "corrupted header" : i < payload_end ? "corrupted payload"
                                                                                               : "corrupted payload";
      CHECK_TEQUANT_ERROR(tequant::load_state(victim.m, bad), expect);
    }
  }
  CHECK(tequant::state_bytes(victim.m) == before);

  for (std::size_t len : {std::size_t{0}, std::size_t{5}, std::size_t{8}, std::size_t{31}, std::size_t{32},
                          std::size_t{100}, good.size() - 9, good.size() - 1}) {
    const std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len));
    CHECK_TEQUANT_ERROR(tequant::load_state(victim.m, cut), "truncated");
  }
  auto longer = good;
  longer.push_back(0);
  CHECK_TEQUANT_ERROR(tequant::load_state(victim.m, longer), "trailing bytes");

  // Another version with a consistent header (what a future writer would produce).
  auto v3 = good;
  v3[8] = 3;
  tequant::detail::byte_writer hw;
  hw.u64(tequant::detail::fnv1a64(std::span<const std::uint8_t>(v3).first(24)));
  std::copy(hw.bytes().begin(), hw.bytes().end(), v3.begin() + 24);
  CHECK_TEQUANT_ERROR(tequant::load_state(victim.m, v3), "unsupported format version 3 (this build reads versions 1 to 2)");

  // A payload with a valid checksum but a broken structure (a faulty writer).
  std::vector<std::uint8_t> junk_payload(40, 0xEE);
  CHECK_TEQUANT_ERROR(tequant::load_state(victim.m, tequant::detail::frame_payload(junk_payload)), "malformed payload");
  auto extra = std::vector<std::uint8_t>(good.begin() + 32, good.end() - 8);
  extra.push_back(0);
  CHECK_TEQUANT_ERROR(tequant::load_state(victim.m, tequant::detail::frame_payload(extra)), "malformed payload");
  CHECK(tequant::state_bytes(victim.m) == before);

  tequant::load_state(victim.m, good);  // and the intact file loads
  CHECK(tequant::state_bytes(victim.m) == good);
}

TEST_CASE("files of another recipe, params, window algorithm or layout are refused with the reason") {
  trained a(3);
  const auto good = tequant::state_bytes(a.m);
  const auto before = tequant::state_bytes(a.m);

  tequant::quantization_manager<tequant::current_scaling, tequant::autocast_entry> cur;
  (void)cur.register_module("layer0");
  CHECK_TEQUANT_ERROR(tequant::load_state(a.m, tequant::state_bytes(cur)),
                      "recipe mismatch: the file holds 'current_scaling' state, this manager uses 'delayed_scaling'");

  auto p = rel::resume_params();
  p.margin = 0;
  resume_manager other_margin(p);
  CHECK_TEQUANT_ERROR(tequant::load_state(other_margin, good),
                      "recipe parameter mismatch (delayed_scaling): margin is 1 in the file, 0 in this manager");
  p = rel::resume_params();
  p.history_length = 6;
  resume_manager other_len(p);
  CHECK_TEQUANT_ERROR(tequant::load_state(other_len, good), "history_length is 5 in the file, 6 in this manager");

  tequant::quantization_manager<tequant::delayed_scaling<tequant::most_recent>, tequant::autocast_entry> mr(
      rel::resume_params());
  CHECK_TEQUANT_ERROR(tequant::load_state(mr, good), "window algorithm");

  resume_manager fewer(rel::resume_params());
  (void)fewer.register_module("layer0");
  CHECK_TEQUANT_ERROR(tequant::load_state(fewer, good), "layout mismatch: the file has 3 modules, this manager registered 1");
  resume_manager renamed(rel::resume_params());
  (void)renamed.register_module("layer0");
  (void)renamed.register_module("layerX");
  (void)renamed.register_module("layer2");
  CHECK_TEQUANT_ERROR(tequant::load_state(renamed, good), "layout mismatch: module 1 is 'layer1'");
  resume_manager regrouped(rel::resume_params());
  (void)regrouped.register_module("layer0");
  (void)regrouped.register_module("layer1", 1, {0, 1});
  (void)regrouped.register_module("layer2");
  CHECK_TEQUANT_ERROR(tequant::load_state(regrouped, good), "groups 0/0) in the file, 'layer1' (1 GEMMs, groups 0/1)");
  const auto regrouped_before = tequant::state_bytes(regrouped);

  {
    auto region = a.m.autocast();
    CHECK_TEQUANT_ERROR(tequant::load_state(a.m, good), "inside an autocast region");
  }
  {
    tequant::checkpoint_frame f("ckpt");
    { auto g = a.m.checkpoint_forward(f); }
    CHECK_TEQUANT_ERROR(tequant::load_state(a.m, good), "still hold snapshots");
  }
  CHECK(tequant::state_bytes(a.m) != before);  // the autocast exit above ran a forward update...
  CHECK(tequant::state_bytes(regrouped) == regrouped_before);  // ...but no refused load changed anything
  CHECK_TEQUANT_ERROR(tequant::load_state(a.m, fs::path("/nonexistent/dir/state.tqs")), "cannot open");
  CHECK_TEQUANT_ERROR(tequant::save_state(a.m, fs::path("/nonexistent/dir/state.tqs")), "cannot create the temporary");
}

TEST_CASE("stateless recipes save layout and counters") {
  using M = tequant::quantization_manager<tequant::current_scaling, tequant::explicit_scope>;
  tequant::current_params p;
  p.amax_epsilon = 0.25f;
  M a(p);
  (void)a.register_module("x", 2, {0, 3});
  (void)a.register_module("y");
  M b(p);
  tequant::load_state(b, tequant::state_bytes(a));
  CHECK(b.module_count() == 2);
  CHECK(b.slot(tequant::module_handle{0}, tequant::backward_role::grad_input, 1) ==
        a.slot(tequant::module_handle{0}, tequant::backward_role::grad_input, 1));
  CHECK(tequant::state_bytes(b) == tequant::state_bytes(a));
  p.amax_epsilon = 0.5f;
  M c(p);
  CHECK_TEQUANT_ERROR(tequant::load_state(c, tequant::state_bytes(a)), "amax_epsilon is 0.25 in the file, 0.5 in this manager");
}

TEST_CASE("a writer killed at random points never leaves an unloadable checkpoint") {
  temp_dir dir;
  const fs::path path = dir.path / "ckpt.tqs";
  auto p = rel::resume_params();
  p.history_length = 1024;  // ~0.5 MB per file, so that kills land inside writes
  resume_manager big(p);
  for (int i = 0; i < 40; ++i) (void)big.register_module("m" + std::to_string(i), 2);
  tequant::save_state(big, path);
  std::mt19937 rng(12345);
  int torn_writes = 0;
  constexpr int rounds = 12;
  for (int round = 0; round < rounds; ++round) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Child: keep changing the state and checkpointing it until killed (never returns into doctest).
      try {
        for (std::uint32_t i = 0;; ++i) {
          auto& bk = big.recipe_state()[i % big.bucket_count()];
          bk.record_amax(i % bk.size(), static_cast<float>(i % 1000) + 1.0f);
          { auto r = big.autocast(); }
          tequant::save_state(big, path);
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    ::usleep(1000 + rng() % 120000);  // one save takes tens of ms: kills land in every phase
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    resume_manager reader(p);
    CHECK_NOTHROW(tequant::load_state(reader, path));  // whatever the child got to: old or new, never torn
    CHECK(reader.module_count() == 40);
    for (const auto& e : fs::directory_iterator(dir.path))
      if (e.path() != path) {
        ++torn_writes;  // a kill inside a write leaves its temporary beside the checkpoint
        fs::remove(e.path());
      }
  }
  MESSAGE(torn_writes << " of " << rounds << " kills landed inside a write");
}

TEST_CASE("TE layout: export/import round trip and identical continuation") {
  trained a(8);
  // The pending flag is not part of TE's per-module layout: flush before exporting.
  a.m.flush_backward_update();
  resume_manager b(rel::resume_params());
  model_t mb(b);
  rel::configure(mb);
  for (std::uint32_t l = 0; l < 3; ++l) {
    const auto t = tequant::export_te_state(a.m, {l});
    CHECK(t.history_length == 5);
    CHECK(t.scale_fwd.size() == 3);
    CHECK(t.amax_history_bwd.size() == 10);
    CHECK(t.amax_history_fwd[3 * 0 + 0] == a.m.staging_amax(a.m.slot({l}, tequant::forward_role::input)));
    CHECK(t.scale_bwd[1] == a.m.scale(a.m.slot({l}, tequant::backward_role::grad_input)));
    tequant::import_te_state(b, {l}, t);
    const auto u = tequant::export_te_state(b, {l});
    CHECK(u.amax_history_fwd == t.amax_history_fwd);
    CHECK(u.scale_bwd == t.scale_bwd);
  }
  mb.w = a.model.w;
  for (int k = 8; k < 14; ++k) CHECK(a.model.step(k) == mb.step(k));
  for (std::uint32_t l = 0; l < 3; ++l) {
    const auto ta = tequant::export_te_state(a.m, {l}), tb = tequant::export_te_state(b, {l});
    CHECK(ta.amax_history_fwd == tb.amax_history_fwd);
    CHECK(ta.scale_fwd == tb.scale_fwd);
    CHECK(ta.scale_bwd == tb.scale_bwd);
  }
  auto t = tequant::export_te_state(a.m, {0});
  t.amax_history_bwd.pop_back();
  const auto before = tequant::state_bytes(b);
  CHECK_TEQUANT_ERROR(tequant::import_te_state(b, {0}, t), "amax_history_bwd has 9 floats, [L, 2*num_gemms] needs 10");
  t = tequant::export_te_state(a.m, {0});
  t.history_length = 4;
  CHECK_TEQUANT_ERROR(tequant::import_te_state(b, {0}, t), "history length 4 differs from this manager's 5");
  CHECK_TEQUANT_ERROR(tequant::import_te_state(b, {7}, t), "module handle 7 is not registered");
  CHECK(tequant::state_bytes(b) == before);
}
