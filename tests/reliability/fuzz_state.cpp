// SPDX-License-Identifier: Apache-2.0
// State-file fuzzer: the loader is the one parser of untrusted bytes. Each input is a state file whose
// size field and checksums are recomputed (so mutations reach the parser behind them), loaded into
// three managers that already hold state (delayed window_max / autocast_entry, delayed most_recent /
// explicit_scope, current scaling / no_recompute). Every load either succeeds, and then the manager
// writes a file that loads back to the same bytes, or raises a `tequant:` error and leaves the
// manager's state byte for byte as it was. Anything else aborts. Allocation limits come from the
// fuzzer's flags (scripts/test.sh: -malloc_limit_mb).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

[[noreturn]] void violated(const char* what, int line) {
  std::fprintf(stderr, "fuzz_state: invariant violated at line %d: %s\n", line, what);
  std::abort();
}
#define FS_CHECK(cond) \
  do {                 \
    if (!(cond)) violated(#cond, __LINE__); \
  } while (0)

void put64(std::vector<std::uint8_t>& f, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) f[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
}

// Size and checksums recomputed; magic, version, flags and payload as the input has them.
std::vector<std::uint8_t> fix_frame(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> f(data, data + size);
  const std::size_t frame = tequant::detail::state_header_bytes + tequant::detail::state_trailer_bytes;
  if (f.size() < frame) return f;
  const std::size_t payload = f.size() - frame;
  put64(f, 16, payload);
  put64(f, 24, tequant::detail::fnv1a64(std::span<const std::uint8_t>(f.data(), 24)));
  put64(f, tequant::detail::state_header_bytes + payload,
        tequant::detail::fnv1a64(std::span<const std::uint8_t>(f.data() + tequant::detail::state_header_bytes, payload)));
  return f;
}

template <class M>
void populate(M& m) {
  const auto a = m.register_module("a", 2);
  (void)m.register_module("b", 1, {1, 0});
  if constexpr (M::is_stateful) {
    {
      auto r = m.autocast();
      const tequant::cast_plan p = m.plan_cast(m.slot(a, tequant::forward_role::input, 1));
      m.backend().max_accumulate(p.amax, 3.5f);
    }
    const tequant::cast_plan g = m.plan_cast(m.slot(a, tequant::backward_role::grad_output, 0));
    m.backend().max_accumulate(g.amax, 0.25f);
  }
}

template <class M, class Params>
void try_load(const std::vector<std::uint8_t>& file, const Params& params) {
  M m(params);
  populate(m);
  const auto before = tequant::state_bytes(m);
  const auto st = m.stats();
  try {
    tequant::load_state(m, file);
  } catch (const tequant::error& e) {
    FS_CHECK(std::string(e.what()).rfind("tequant: ", 0) == 0);
    FS_CHECK(tequant::state_bytes(m) == before);
    const auto now = m.stats();
    FS_CHECK(now.forward_updates == st.forward_updates && now.backward_updates == st.backward_updates);
    FS_CHECK(now.collectives == st.collectives && now.pending == st.pending);
    return;
  }
  // Adopted: what it writes now loads into a fresh manager and writes the same bytes.
  const auto after = tequant::state_bytes(m);
  M fresh(params);
  tequant::load_state(fresh, after);
  FS_CHECK(tequant::state_bytes(fresh) == after);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> file = fix_frame(data, size);
  tequant::delayed_params window;
  window.history_length = 5;
  window.margin = 1;
  try_load<tequant::quantization_manager<tequant::delayed_scaling<>, tequant::autocast_entry>>(file, window);
  tequant::delayed_params recent;
  recent.history_length = 3;
  recent.format = tequant::fp8_format::e4m3;
  recent.reduce_amax = false;
  try_load<tequant::quantization_manager<tequant::delayed_scaling<tequant::most_recent>, tequant::explicit_scope>>(
      file, recent);
  tequant::current_params current;
  current.power_2_scale = true;
  current.amax_epsilon = 1e-6f;
  try_load<tequant::quantization_manager<tequant::current_scaling, tequant::autocast_entry, tequant::no_recompute>>(
      file, current);
  return 0;
}
