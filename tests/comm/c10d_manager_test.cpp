// SPDX-License-Identifier: Apache-2.0
// The manager with c10d_comm over Gloo between 2 and 4 local processes: identical state on every
// rank, equal to one process over the concatenated data (as tests/comm/mpi_manager_test.cpp for MPI);
// TE's distributed scenarios H and I; the layout check; a failed collective leaves the update pending.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "c10d_test_util.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/comm/single_process.hpp"
#include "tequant/error.hpp"
#include "tequant/integration/c10d_comm.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

using tequant_test::all_ranks;
using tequant_test::identical_across_ranks;
using tequant_test::world_rank;
using tequant_test::world_size;
using tequant_test::make_pair_group;
using tequant_test::make_world_group;

namespace {

using tequant::backward_role;
using tequant::direction;
using tequant::forward_role;

template <class Boundary, class Comm>
using manager = tequant::quantization_manager<tequant::delayed_scaling<>, Boundary, tequant::stacked_recompute, Comm>;

constexpr std::uint32_t history = 4;  // short, so the window slides within the test
constexpr int modules = 3;
constexpr int steps = 6;

std::uint32_t mix(std::uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352dU;
  h ^= h >> 15;
  h *= 0x846ca68bU;
  h ^= h >> 16;
  return h;
}

/// The amax rank r's data has for (step, module, dir, k): different per rank; sometimes 0 on one rank
/// (it did not use the slot), sometimes 0 on every rank (TE's "untouched" path).
float amax_data(int r, int step, int module, direction d, int k) {
  const std::uint32_t key = static_cast<std::uint32_t>(((step * 16 + module) * 2 + static_cast<int>(d)) * 8 + k);
  if (mix(key) % 6 == 0) return 0.0f;
  const std::uint32_t h = mix(key * 131u + static_cast<std::uint32_t>(r) * 7919u + 1u);
  if (h % 7 == 0) return 0.0f;
  return static_cast<float>(h % 100000u + 1u) * 1e-3f * static_cast<float>(1 + step % 3);
}

/// Which ranks' data a module's casts see this step (scenarios: some ranks skip a module's backward,
/// or the whole backward).
struct step_plan {
  std::function<bool(int rank, int step)> runs_backward = [](int, int) { return true; };
  std::function<bool(int rank, int step, int module)> runs_module_backward = [](int, int, int) { return true; };
};

struct model {
  std::vector<tequant::module_handle> handles;
  std::vector<tequant::reduction_groups> groups;
};

template <class M>
model build(M& m, const std::vector<tequant::reduction_groups>& groups) {
  model md{{}, groups};
  for (int i = 0; i < modules; ++i)
    md.handles.push_back(m.register_module("linear" + std::to_string(i), 1, groups[static_cast<std::size_t>(i)]));
  return md;
}

/// The ranks whose amaxes a slot of `group` combines: all (group 0) or the rank's pair (group 1).
std::vector<int> ranks_of(std::uint32_t group) {
  std::vector<int> r;
  for (int q = 0; q < world_size(); ++q)
    if (group == 0 || q / 2 == world_rank() / 2) r.push_back(q);
  return r;
}

/// One training step. `sources(dir, group)` = the ranks whose data this process records (its own rank
/// for the distributed manager; every rank of the group for the single-process reference).
template <class M, class Sources>
void step(M& m, const model& md, int s, const step_plan& plan, Sources sources) {
  {
    auto region = m.autocast();
    for (int i = 0; i < modules; ++i) {
      (void)m.module_forward(md.handles[static_cast<std::size_t>(i)]);
      for (int k = 0; k < 3; ++k) {
        const auto p = m.plan_cast(m.slot(md.handles[static_cast<std::size_t>(i)], static_cast<forward_role>(k)));
        for (int q : sources(direction::forward, md.groups[static_cast<std::size_t>(i)].forward))
          m.backend().max_accumulate(p.amax, amax_data(q, s, i, direction::forward, k));
      }
    }
  }  // forward update
  auto module_backward = [&](int i) {
    for (int k = 0; k < 2; ++k) {
      const auto p = m.plan_cast(m.slot(md.handles[static_cast<std::size_t>(i)], static_cast<backward_role>(k)));
      for (int q : sources(direction::backward, md.groups[static_cast<std::size_t>(i)].backward))
        if (plan.runs_backward(q, s) && plan.runs_module_backward(q, s, i))
          m.backend().max_accumulate(p.amax, amax_data(q, s, i, direction::backward, k));
    }
    m.request_backward_update();
  };
  auto scope = m.backward_scope();
  for (int i = modules - 1; i >= 0; --i) {
    // The distributed manager skips what its own rank skips; the reference runs every module and
    // records only the ranks that ran it.
    bool any = false;
    for (int q : sources(direction::backward, 0)) any = any || (plan.runs_backward(q, s) && plan.runs_module_backward(q, s, i));
    if (any) module_backward(i);
  }
}

/// Everything that must agree: per bucket, every slot's scale and its TE-layout [L, n] history.
template <class M>
std::vector<float> state_of(M& m, int group = -1) {
  std::vector<float> out;
  for (std::uint32_t b = 0; b < m.bucket_count(); ++b) {
    if (group >= 0 && m.bucket(b).group != static_cast<std::uint32_t>(group)) continue;
    const auto& st = m.recipe_state()[b];
    const std::uint32_t n = st.size();
    for (std::uint32_t j = 0; j < n; ++j) out.push_back(st.scale(j));
    std::vector<float> h(static_cast<std::size_t>(history) * n);
    st.export_te_history(0, n, h);
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return false;
  return true;
}

tequant::delayed_params params(bool reduce = true) {
  tequant::delayed_params p;
  p.history_length = history;
  p.reduce_amax = reduce;
  return p;
}

/// Runs `steps` steps distributed and as the single-process reference; checks after every step that
/// all ranks agree bit for bit and match the reference; returns the distributed manager's stats.
/// `group1` is this rank's process group of reduction group 1 (null: group 1 unused).
template <class Boundary>
tequant::manager_stats run_and_compare(const step_plan& plan, std::vector<tequant::reduction_groups> groups,
                                       tequant::c10d_comm comm, bool* all_steps_ok,
                                       const tequant::c10d_comm::group_ptr& group1 = {}) {
  manager<Boundary, tequant::c10d_comm> dist(params(), {}, std::move(comm));
  manager<Boundary, tequant::single_process> ref(params());
  const model md = build(dist, groups);
  const model mr = build(ref, groups);
  const int me = world_rank();
  bool ok = true;
  for (int s = 0; s < steps; ++s) {
    const auto before = dist.stats();
    step(dist, md, s, plan, [&](direction, std::uint32_t) { return std::vector<int>{me}; });
    step(ref, mr, s, plan, [&](direction, std::uint32_t g) { return ranks_of(g); });
    if constexpr (!std::is_same_v<Boundary, tequant::explicit_scope>) {
      dist.flush_backward_update();  // nothing pending after a scope; a no-op that must not hang
      ref.flush_backward_update();
    }
    const auto after = dist.stats();
    ok = ok && !after.pending && after.forward_updates == before.forward_updates + 1 &&
         after.backward_updates == before.backward_updates + 1;
    // Group-0 buckets agree over the world, group-1 buckets within the rank's group-1 process group.
    const bool same0 = identical_across_ranks(state_of(dist, 0));
    const bool same1 = group1.defined() ? identical_across_ranks(state_of(dist, 1), *group1) : state_of(dist, 1).empty();
    ok = ok && same0 && same1 && bit_equal(state_of(dist), state_of(ref));
  }
  *all_steps_ok = ok;
  return dist.stats();
}

tequant::c10d_comm world_comm(bool check_layout = false) {
  return tequant::c10d_comm(make_world_group(), tequant::comm_options{check_layout});
}

}  // namespace

TEST_CASE("manager + c10d_comm: every rank ends every step with the state of one process over all data") {
  bool ok = false;
  const auto st = run_and_compare<tequant::explicit_scope>({}, {{0, 0}, {0, 0}, {0, 0}}, world_comm(), &ok);
  CHECK(all_ranks(ok));
  // One bucket per direction: one all-reduce per update.
  CHECK(st.collectives == 2u * steps);
  CHECK(all_ranks(st.collectives == 2u * steps));
  CHECK(all_ranks(st.backward_updates == static_cast<std::uint64_t>(steps)));
}

TEST_CASE("manager + c10d_comm: groups per bucket (tensor-parallel pairs for one module's activations)") {
  const auto pairs = make_pair_group();
  bool ok = false;
  // linear1's forward slots reduce over the pair: buckets forward/0, forward/1, backward/0.
  const auto st = run_and_compare<tequant::explicit_scope>(
      {}, {{0, 0}, {1, 0}, {0, 0}}, tequant::c10d_comm({make_world_group(), pairs}), &ok, pairs);
  CHECK(all_ranks(ok));
  CHECK(st.collectives == 3u * steps);
}

TEST_CASE("manager + c10d_comm: buckets created in a different group order on different ranks do not deadlock") {
  manager<tequant::explicit_scope, tequant::c10d_comm> m(params(), {},
                                                         tequant::c10d_comm({make_world_group(), make_pair_group()}));
  // Odd ranks meet the group-1 module first, so their forward buckets are created in the other order.
  const bool odd = world_rank() % 2 == 1;
  const auto a = m.register_module(odd ? "tp" : "dp", 1, {odd ? 1u : 0u, 0});
  const auto b = m.register_module(odd ? "dp" : "tp", 1, {odd ? 0u : 1u, 0});
  {
    auto region = m.autocast();
    for (auto h : {a, b})
      m.backend().max_accumulate(m.plan_cast(m.slot(h, forward_role::input)).amax, 1.0f + static_cast<float>(world_rank()));
  }
  CHECK(m.stats().collectives == 2);
  const float expect_dp = static_cast<float>(world_size());  // max over the world of 1 + rank
  const auto dp = odd ? b : a;
  CHECK(m.scale(m.slot(dp, forward_role::input)) == doctest::Approx(448.0f / expect_dp));
}

TEST_CASE("scenario H: a rank skips one module's backward; no hang, identical state (explicit_scope)") {
  step_plan plan;
  plan.runs_module_backward = [](int r, int s, int module) { return !(module == 0 && r % 2 == 1 && s % 2 == 0); };
  bool ok = false;
  const auto st = run_and_compare<tequant::explicit_scope>(plan, {{0, 0}, {0, 0}, {0, 0}}, world_comm(), &ok);
  CHECK(all_ranks(ok));
  CHECK(st.backward_updates == static_cast<std::uint64_t>(steps));
}

TEST_CASE("scenario H under autocast_entry (TE's fallback boundary): flushed at the next boundary, same state") {
  step_plan plan;
  plan.runs_module_backward = [](int r, int, int module) { return !(module == 0 && r == world_size() - 1); };
  bool ok = false;
  (void)run_and_compare<tequant::autocast_entry>(plan, {{0, 0}, {0, 0}, {0, 0}}, world_comm(), &ok);
  CHECK(all_ranks(ok));
}

TEST_CASE("scenario I: odd ranks run no backward at all inside backward_scope(); no hang, identical state") {
  step_plan plan;
  plan.runs_backward = [](int r, int) { return r % 2 == 0; };
  bool ok = false;
  const auto st = run_and_compare<tequant::explicit_scope>(plan, {{0, 0}, {0, 0}, {0, 0}}, world_comm(), &ok);
  CHECK(all_ranks(ok));
  CHECK(all_ranks(st.backward_updates == static_cast<std::uint64_t>(steps)));
  CHECK(all_ranks(st.collectives == 2u * steps));
}

TEST_CASE("without reduce_amax no collective runs and every rank keeps its local state") {
  manager<tequant::explicit_scope, tequant::c10d_comm> m(params(false), {}, world_comm());
  const model md = build(m, {{0, 0}, {0, 0}, {0, 0}});
  manager<tequant::explicit_scope, tequant::single_process> local(params(false));
  const model ml = build(local, {{0, 0}, {0, 0}, {0, 0}});
  const int me = world_rank();
  for (int s = 0; s < 3; ++s) {
    step(m, md, s, {}, [&](direction, std::uint32_t) { return std::vector<int>{me}; });
    step(local, ml, s, {}, [&](direction, std::uint32_t) { return std::vector<int>{me}; });
  }
  CHECK(m.stats().collectives == 0);
  CHECK(bit_equal(state_of(m), state_of(local)));
  CHECK_FALSE(all_ranks(identical_across_ranks(state_of(m))));  // really local: ranks differ
}

TEST_CASE("layout check: a rank with an extra slot gets the error on EVERY rank, within bounded time") {
  const bool last = world_rank() == world_size() - 1;
  manager<tequant::explicit_scope, tequant::c10d_comm> m(params(), {}, world_comm(true));
  const auto h = m.register_module("linear0", last ? 2u : 1u);  // the last rank: 3 extra forward slots
  (void)m.register_module("linear1");
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    auto region = m.autocast();
    m.backend().max_accumulate(m.plan_cast(m.slot(h, forward_role::input)).amax, 1.0f);
  } catch (const tequant::error& e) {
    msg = e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(all_ranks(seconds < 10.0));
  CHECK(all_ranks(msg.find("tequant: layout check (reduction group 0, rank " + std::to_string(world_rank())) == 0));
  CHECK(all_ranks(msg.find("forward bucket of group 0") != std::string::npos));
  CHECK(all_ranks(msg.find("range over [6, 9]") != std::string::npos));
  CHECK(m.stats().collectives == 0);  // nothing was reduced
  CHECK(m.stats().forward_updates == 0);
  CHECK_FALSE(m.comm().failed());
}

TEST_CASE("layout check: same counts, different modules (order) is caught too; matching layouts pass") {
  manager<tequant::explicit_scope, tequant::c10d_comm> bad(params(), {}, world_comm(true));
  const bool odd = world_rank() % 2 == 1;
  (void)bad.register_module(odd ? "b" : "a");
  (void)bad.register_module(odd ? "a" : "b");
  std::string msg;
  try {
    auto region = bad.autocast();
  } catch (const tequant::error& e) {
    msg = e.what();
  }
  CHECK(all_ranks(msg.find("but the slots differ") != std::string::npos));

  manager<tequant::explicit_scope, tequant::c10d_comm> good(params(), {}, world_comm(true));
  const model md = build(good, {{0, 0}, {0, 0}, {0, 0}});
  const int me = world_rank();
  CHECK_NOTHROW(step(good, md, 0, {}, [&](direction, std::uint32_t) { return std::vector<int>{me}; }));
  CHECK(good.stats().collectives == 2);  // the check's collectives are not amax all-reduces
}

TEST_CASE("a module in a group the communicator does not have is rejected at registration") {
  manager<tequant::explicit_scope, tequant::c10d_comm> m(params(), {}, world_comm());
  CHECK_THROWS_WITH_AS(m.register_module("tp", 1, {1, 0}),
                       doctest::Contains("reduction groups (forward 1, backward 0) must be below the communicator's 1 groups"),
                       tequant::error);
}

TEST_CASE("a rank that dies mid-step: the others' flush fails within the time-out, the update stays pending") {
  const bool last = world_rank() == world_size() - 1;
  manager<tequant::explicit_scope, tequant::c10d_comm> m(
      params(), {}, tequant::c10d_comm(make_world_group(std::chrono::seconds(3))));
  const model md = build(m, {{0, 0}, {0, 0}, {0, 0}});
  const int me = world_rank();
  step(m, md, 0, {}, [&](direction, std::uint32_t) { return std::vector<int>{me}; });  // a healthy step
  const auto go = m.slot(md.handles[0], backward_role::grad_output);
  const float scale_before = m.scale(go);
  std::string msg;
  const auto t0 = std::chrono::steady_clock::now();
  if (!last) {  // the last rank "died" before its backward
    try {
      auto scope = m.backward_scope();
      m.backend().max_accumulate(m.plan_cast(go).amax, 1e6f);
      m.request_backward_update();
    } catch (const tequant::error& e) {
      msg = e.what();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(seconds < 8.0);
    CHECK(msg.find("tequant: c10d_comm::all_reduce_max (rank " + std::to_string(me) + " of group 0") == 0);
    CHECK(m.stats().pending);
    CHECK(m.stats().backward_updates == 1);
    CHECK(m.scale(go) == scale_before);
    CHECK(m.staging_amax(go) == 1e6f);
    // Every later update refuses (the Gloo context is unusable) instead of hanging or reducing garbage.
    CHECK_THROWS_WITH_AS(m.flush_backward_update(), doctest::Contains("rebuild the process groups"), tequant::error);
    CHECK(m.stats().pending);
  }
  CHECK(all_ranks(true));
}
