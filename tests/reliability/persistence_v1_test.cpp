// SPDX-License-Identifier: Apache-2.0
// Version-1 state files (written before the policy redesign, tests/reliability/fixtures) load with
// today's code bit for bit: counters, the pending flag, every slot's scale and staging amax, every
// bucket's history; and training continues exactly as the old code continued it.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/manager.hpp"
#include "tequant/persistence/state.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

using namespace tequant;

std::filesystem::path fixture(const char* name) { return std::filesystem::path(TEQUANT_FIXTURES) / name; }

std::string read_text(const std::filesystem::path& p) {
  std::ifstream is(p);
  REQUIRE(is.good());
  std::stringstream ss;
  ss << is.rdbuf();
  return ss.str();
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The generator's write_expect(), with today's API: the same text for the same state.
template <class M>
std::string expect_of(M& m) {
  std::ostringstream os;
  const auto st = m.stats();
  os << "forward_updates " << st.forward_updates << "\nbackward_updates " << st.backward_updates << "\ncollectives "
     << st.collectives << "\npending " << st.pending << "\n";
  os << "modules " << m.module_count() << "\nbuckets " << m.bucket_count() << "\n";
  if constexpr (M::is_stateful) {
    auto& rs = m.recipe_state();
    for (std::size_t b = 0; b < rs.size(); ++b) {
      auto& bk = rs[b];
      const auto L = bk.history_length(), n = bk.size();
      std::vector<float> h(static_cast<std::size_t>(L) * n);
      bk.export_te_history(0, n, h);
      os << "bucket " << b << " dir " << int(m.bucket(static_cast<std::uint32_t>(b)).dir) << " group "
         << m.bucket(static_cast<std::uint32_t>(b)).group << " slots " << n << " L " << L << "\n";
      for (std::uint32_t j = 0; j < n; ++j)
        os << "scale " << b << " " << j << " " << std::hex << bits(bk.scale(j)) << " staging "
           << bits(bk.staging_amax(j)) << std::dec << "\n";
      for (std::size_t i = 0; i < h.size(); ++i) os << std::hex << bits(h[i]) << std::dec << (i + 1 == h.size() ? "\n" : " ");
    }
  }
  return os.str();
}

// The generator's step(): deterministic forward casts (a NaN at step 3) and backward requests.
template <class M>
void step(M& m, const std::vector<module_handle>& mods, int k) {
  std::vector<float> x(64);
  std::vector<std::uint8_t> q(x.size());
  float si = 0.0f;
  {
    auto r = m.autocast();
    for (std::size_t i = 0; i < mods.size(); ++i)
      for (auto role : {forward_role::input, forward_role::weight, forward_role::output}) {
        const cast_plan p = m.plan_cast(m.slot(mods[i], role));
        for (std::size_t e = 0; e < x.size(); ++e)
          x[e] = float((int(e * 7 + i * 13 + static_cast<std::size_t>(k) * 5 + static_cast<std::size_t>(role)) % 23) - 11) *
                 (0.03125f * float(k + 1) + float(i));
        if (i == 1 && role == forward_role::output && k == 3) x[5] = __builtin_nanf("");
        if (p.amax) m.backend().quantize_tensor(x.data(), x.size(), p.scale, p.dtype, q.data(), &si, p.amax);
      }
  }
  for (std::size_t i = mods.size(); i-- > 0;) {
    for (auto role : {backward_role::grad_output, backward_role::grad_input}) {
      const cast_plan p = m.plan_cast(m.slot(mods[i], role));
      for (std::size_t e = 0; e < x.size(); ++e)
        x[e] = float((int(e * 3 + i * 11 + static_cast<std::size_t>(k)) % 19) - 9) * 1e-3f * float(k + 2);
      if (p.amax) m.backend().quantize_tensor(x.data(), x.size(), p.scale, p.dtype, q.data(), &si, p.amax);
    }
    m.request_backward_update();
  }
}

}  // namespace

TEST_CASE("v1: delayed scaling (window max, 4 modules, 2 groups, pending update, a NaN) loads and continues") {
  delayed_params p;
  p.history_length = 5;
  p.margin = 1;
  p.format = fp8_format::hybrid;
  quantization_manager<delayed_scaling<>, autocast_entry> m(p);
  load_state(m, fixture("state_v1_delayed.tqs"));
  CHECK(expect_of(m) == read_text(fixture("state_v1_delayed.expect")));
  // Saved again (as version 2) and loaded into another manager: the same state.
  const auto v2 = state_bytes(m);
  quantization_manager<delayed_scaling<>, autocast_entry> again(p);
  load_state(again, v2);
  CHECK(expect_of(again) == expect_of(m));
  // Three more steps, as the old code ran them after saving.
  const std::vector<module_handle> mods{{0}, {1}, {2}, {3}};
  CHECK(m.module_name(mods[2]) == "mlp");
  for (int k = 7; k < 10; ++k) step(m, mods, k);
  CHECK(expect_of(m) == read_text(fixture("state_v1_delayed.after3.expect")));
}

TEST_CASE("v1: delayed scaling (most_recent, e4m3, no reduction) under explicit_scope loads") {
  delayed_params p;
  p.history_length = 3;
  p.format = fp8_format::e4m3;
  p.reduce_amax = false;
  quantization_manager<delayed_scaling<most_recent>, explicit_scope> m(p);
  load_state(m, fixture("state_v1_most_recent.tqs"));
  CHECK(expect_of(m) == read_text(fixture("state_v1_most_recent.expect")));
  // The window algorithm is part of the file's identity.
  quantization_manager<delayed_scaling<>, explicit_scope> other(p);
  CHECK_THROWS_AS(load_state(other, fixture("state_v1_most_recent.tqs")), tequant::error);
  CHECK(other.module_count() == 0);
}

TEST_CASE("v1: current scaling (stateless, no_recompute) loads its modules and params") {
  current_params p;
  p.power_2_scale = true;
  p.amax_epsilon = 1e-6f;
  quantization_manager<current_scaling, autocast_entry, no_recompute> m(p);
  load_state(m, fixture("state_v1_current.tqs"));
  CHECK(expect_of(m) == read_text(fixture("state_v1_current.expect")));
  CHECK(m.module_count() == 2);
  current_params q;  // other params: refused, nothing adopted
  quantization_manager<current_scaling, autocast_entry, no_recompute> other(q);
  CHECK_THROWS_AS(load_state(other, fixture("state_v1_current.tqs")), tequant::error);
  CHECK(other.module_count() == 0);
}
