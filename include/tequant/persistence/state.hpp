// SPDX-License-Identifier: Apache-2.0
// Save and load a quantization_manager's complete state: recipe name and params, module and bucket
// layout, per-slot staging amaxes, scales and history rings, update counters and the pending flag.
//
// File layout (version 1, every integer little-endian, floats as their IEEE bit patterns):
//   header   "TQSTATE\0" | u32 version | u32 0 | u64 payload bytes | u64 FNV-1a 64 of the 24 bytes before
//   payload  recipe name, params, [window-algorithm probe], modules, buckets, counters, pending, bucket state
//   trailer  u64 FNV-1a 64 of the payload
// The header has its own checksum so that a damaged size or version field is reported as damage and
// not as "truncated" or "another version". Loading parses and verifies everything into temporaries
// and then commits with noexcept swaps: on any error the live state is untouched (strong guarantee).
// The monotonic window deque is not stored; it is a function of the ring and is rebuilt on load.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <istream>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/manager.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/persistence/access.hpp"
#include "tequant/persistence/atomic_file.hpp"
#include "tequant/persistence/bytes.hpp"
#include "tequant/persistence/params.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace tequant {

/// The version this build writes and the only one it reads.
inline constexpr std::uint32_t state_format_version = 1;

namespace detail {

inline constexpr std::uint8_t state_magic[8] = {'T', 'Q', 'S', 'T', 'A', 'T', 'E', 0};
inline constexpr std::size_t state_header_bytes = 32;
inline constexpr std::size_t state_trailer_bytes = 8;
/// Bound on slots per bucket accepted from a file (far above any model; stops forged sizes).
inline constexpr std::uint64_t state_max_slots = 1ull << 28;

inline void write_field(byte_writer& w, fp8_format v) { w.u8(static_cast<std::uint8_t>(v)); }
inline void write_field(byte_writer& w, bool v) { w.u8(v ? 1 : 0); }
inline void write_field(byte_writer& w, std::uint32_t v) { w.u32(v); }
inline void write_field(byte_writer& w, int v) { w.i32(v); }
inline void write_field(byte_writer& w, float v) { w.f32(v); }

inline void read_field(byte_reader& r, const char* name, fp8_format& v) {
  const std::uint8_t b = r.u8();
  if (b > static_cast<std::uint8_t>(fp8_format::e5m2)) r.malformed("param ", name, " is ", unsigned{b});
  v = static_cast<fp8_format>(b);
}
inline void read_field(byte_reader& r, const char* name, bool& v) { v = r.boolean(name); }
inline void read_field(byte_reader& r, const char*, std::uint32_t& v) { v = r.u32(); }
inline void read_field(byte_reader& r, const char*, int& v) { v = r.i32(); }
inline void read_field(byte_reader& r, const char*, float& v) { v = r.f32(); }

inline bool same_bits(float a, float b) noexcept { return float_bits(a) == float_bits(b); }
template <class T>
bool same_field(const T& a, const T& b) noexcept {
  if constexpr (std::is_same_v<T, float>) return same_bits(a, b);
  else return a == b;
}

/// Two fixed probes of the window algorithm: window_max and most_recent (and most user functors)
/// answer them differently, so a file written with another Algo is refused.
template <class Recipe>
void algo_probe(float out[2]) noexcept {
  const typename Recipe::algo_type algo{};
  out[0] = algo(1.0f, 2.0f);
  out[1] = algo(3.0f, 0.5f);
}

/// The bucket table that registering `modules` in order builds (the manager's add_slots rule).
struct layout_module {
  std::string name;
  std::uint32_t num_gemms, forward_group, backward_group;
};
struct layout_bucket {
  direction dir;
  std::uint32_t group;
  std::uint64_t slots;
  friend bool operator==(const layout_bucket&, const layout_bucket&) = default;
};
struct layout_result {
  std::vector<layout_bucket> buckets;
  std::vector<slot_id> forward_base, backward_base;
};
inline layout_result derive_layout(const std::vector<layout_module>& modules) {
  layout_result r;
  auto add = [&](direction d, std::uint32_t g, std::uint64_t count) {
    std::uint32_t b = 0;
    while (b < r.buckets.size() && !(r.buckets[b].dir == d && r.buckets[b].group == g)) ++b;
    if (b == r.buckets.size()) r.buckets.push_back({d, g, 0});
    const slot_id first{d, b, static_cast<std::uint32_t>(r.buckets[b].slots)};
    r.buckets[b].slots += count;
    return first;
  };
  for (const auto& m : modules) {
    r.forward_base.push_back(add(direction::forward, m.forward_group, 3ull * m.num_gemms));
    r.backward_base.push_back(add(direction::backward, m.backward_group, 2ull * m.num_gemms));
  }
  return r;
}

/// Host copy of one bucket's delayed-scaling state (the deque is rebuilt from ring and heads).
struct bucket_arrays {
  std::uint32_t L = 0, n = 0;
  std::vector<float> staging, scale, ring;
  std::vector<std::uint32_t> head;
};

/// Rebuilds slot j's window deque from its ring: pushing the L ring values oldest first, starting at
/// the ring head, rewrites each value in place, brings the head back where it was, and leaves the
/// deque every earlier push sequence with the same ring would have left (the strictly decreasing
/// suffix maxima of the window), so every later update is bit-identical.
inline void rebuild_window(const delayed_bucket_view& v, std::uint32_t j) noexcept {
  const std::uint32_t L = v.history_length, head = v.ring_head[j];
  v.window_front[j] = 0;
  v.window_size[j] = 0;
  const float* ring = v.ring + static_cast<std::size_t>(j) * L;
  for (std::uint32_t k = 0; k < L; ++k) {
    std::uint32_t p = head + k;
    if (p >= L) p -= L;
    delayed_ring_push(v, j, ring[p]);
  }
}

template <class M>
void check_quiescent(M& m, const std::string& where) {
  auto& s = manager_access::state(m);
  require(s.autocast_depth == 0, where, ": called inside an autocast region (depth ", s.autocast_depth,
          "); load between steps");
  require(s.scope_depth.load() == 0, where, ": called inside a backward scope (depth ", s.scope_depth.load(),
          "); load between steps");
  require(s.frames.empty(), where, ": called while ", s.frames.size(), " checkpoint frame(s) are open; load between steps");
  require(s.outstanding_snapshots == 0, where, ": ", s.outstanding_snapshots,
          " checkpoint frame(s) still hold snapshots of the current scales; finish their replays (or destroy "
          "the frames) before loading");
}

/// Checks magic, header checksum, version, size and payload checksum; returns the payload.
inline std::span<const std::uint8_t> verify_frame(std::span<const std::uint8_t> file, const std::string& where) {
  const std::size_t have = file.size();
  if (have >= sizeof state_magic) {
    for (std::size_t i = 0; i < sizeof state_magic; ++i)
      require(file[i] == state_magic[i], where, ": not a tequant state file (bad magic)");
  }
  require(have >= state_header_bytes, where, ": truncated: ", have, " bytes, the header alone has ",
          state_header_bytes);
  byte_reader h(file.first(state_header_bytes), where);
  for (std::size_t i = 0; i < sizeof state_magic; ++i) (void)h.u8();
  const std::uint32_t version = h.u32();
  const std::uint32_t reserved = h.u32();
  const std::uint64_t payload = h.u64();
  const std::uint64_t stored = h.u64();
  const std::uint64_t computed = fnv1a64(file.first(24));
  require(stored == computed, where, ": corrupted header (header checksum mismatch)");
  require(version == state_format_version, where, ": unsupported format version ", version,
          " (this build reads version ", state_format_version, ")");
  require(reserved == 0, where, ": unsupported header flags ", reserved, " (version ", version, " writes 0)");
  const std::uint64_t total = state_header_bytes + payload + state_trailer_bytes;
  require(payload <= have && have >= total, where, ": truncated: ", have, " bytes, the header announces ", total);
  require(have == total, where, ": ", have - total, " unexpected trailing bytes after the state (", total,
          " expected)");
  const auto body = file.subspan(state_header_bytes, static_cast<std::size_t>(payload));
  byte_reader t(file.subspan(state_header_bytes + body.size()), where);
  const std::uint64_t want = t.u64(), got = fnv1a64(body);
  require(want == got, where, ": corrupted payload (checksum mismatch)");
  return body;
}

inline std::vector<std::uint8_t> frame_payload(std::vector<std::uint8_t> payload) {
  byte_writer w;
  w.reserve(state_header_bytes + payload.size() + state_trailer_bytes);
  w.raw(state_magic);
  w.u32(state_format_version);
  w.u32(0);
  w.u64(payload.size());
  w.u64(fnv1a64(w.bytes()));
  w.raw(payload);
  w.u64(fnv1a64(payload));
  return std::move(w.bytes());
}

}  // namespace detail

/// The manager's complete state as a version-1 state file image. Call it between steps: inside a
/// step it records the half-accumulated staging amaxes of that step. Host-syncs on device backends.
template <class M>
std::vector<std::uint8_t> state_bytes(const M& m) {
  using Recipe = typename M::recipe_type;
  auto& s = detail::manager_access::state(const_cast<M&>(m));  // read only
  detail::byte_writer w;
  w.str(Recipe::name);
  auto params = s.params;
  detail::persist_fields(params, [&](const char*, auto& v) { detail::write_field(w, v); });
  if constexpr (M::is_stateful) {
    float probe[2];
    detail::algo_probe<Recipe>(probe);
    w.f32(probe[0]);
    w.f32(probe[1]);
  }
  w.u32(static_cast<std::uint32_t>(s.modules.size()));
  for (const auto& mod : s.modules) {
    w.str(mod.name);
    w.u32(mod.num_gemms);
    w.u32(s.buckets[mod.forward_base.bucket].group);
    w.u32(s.buckets[mod.backward_base.bucket].group);
  }
  w.u32(static_cast<std::uint32_t>(s.buckets.size()));
  for (const auto& b : s.buckets) {
    w.u8(static_cast<std::uint8_t>(b.dir));
    w.u32(b.group);
    w.u32(b.slots);
  }
  w.u64(s.forward_updates.load());
  w.u64(s.backward_updates.load());
  w.u64(s.collectives.load());
  w.u8(s.pending.load() ? 1 : 0);
  if constexpr (M::is_stateful) {
    for (auto& bk : s.recipe) {
      const delayed_bucket_view v = bk.view();
      const std::size_t n = v.slots, rn = n * v.history_length;
      std::vector<float> f(rn > n ? rn : n);
      std::vector<std::uint32_t> u(n);
      w.u32(v.history_length);
      w.u32(v.slots);
      bk.backend().download(f.data(), v.staging, n);
      w.array32(std::span<const float>(f.data(), n));
      bk.backend().download(f.data(), v.scale, n);
      w.array32(std::span<const float>(f.data(), n));
      bk.backend().download(u.data(), v.ring_head, n);
      w.array32(std::span<const std::uint32_t>(u));
      bk.backend().download(f.data(), v.ring, rn);
      w.array32(std::span<const float>(f.data(), rn));
    }
  }
  return detail::frame_payload(std::move(w.bytes()));
}

/// Replaces the manager's state by the one in `file` (a state_bytes image). The manager must be
/// between steps (no open region, scope or frame, no unreplayed snapshot). A manager without modules
/// adopts the file's layout; one with modules must have registered exactly the file's modules (names,
/// GEMM counts, groups, order). Any error names its class (bad magic, corrupted header, unsupported
/// version, truncated, trailing bytes, corrupted payload, recipe mismatch, recipe parameter mismatch,
/// layout mismatch, malformed payload, manager busy) and leaves the live state untouched.
template <class M>
void load_state(M& m, std::span<const std::uint8_t> file, const std::string& where = "load_state") {
  using Recipe = typename M::recipe_type;
  using params_type = typename M::params_type;
  auto& s = detail::manager_access::state(m);
  detail::check_quiescent(m, where);
  const auto payload = detail::verify_frame(file, where);
  detail::byte_reader r(payload, where);

  const std::string name = r.str("recipe name");
  detail::require(name == Recipe::name, where, ": recipe mismatch: the file holds '", name,
                  "' state, this manager uses '", Recipe::name, "'");
  params_type fp = s.params;
  detail::persist_fields(fp, [&](const char* field, auto& v) { detail::read_field(r, field, v); });
  {
    // Field by field, so that the message names the first difference (bit-exact for floats).
    std::vector<std::string> file_values, names;
    detail::persist_fields(fp, [&](const char* field, auto& v) {
      names.emplace_back(field);
      file_values.push_back(detail::param_to_string(v));
    });
    std::size_t i = 0;
    std::string diff;
    detail::persist_fields(fp, [&](const char*, auto& v) {
      auto live = s.params;
      std::size_t k = 0;
      detail::persist_fields(live, [&](const char*, auto& lv) {
        if constexpr (std::is_same_v<std::decay_t<decltype(lv)>, std::decay_t<decltype(v)>>) {
          if (k == i && diff.empty() && !detail::same_field(lv, v))
            diff = names[i] + " is " + file_values[i] + " in the file, " + detail::param_to_string(lv) +
                   " in this manager";
        }
        ++k;
      });
      ++i;
    });
    detail::require(diff.empty(), where, ": recipe parameter mismatch (", Recipe::name, "): ", diff);
  }
  if constexpr (M::is_stateful) {
    float probe[2], mine[2];
    probe[0] = r.f32();
    probe[1] = r.f32();
    detail::algo_probe<Recipe>(mine);
    detail::require(detail::same_bits(probe[0], mine[0]) && detail::same_bits(probe[1], mine[1]), where,
                    ": recipe mismatch: the file's window algorithm (Algo of delayed_scaling) answers (", probe[0],
                    ", ", probe[1], ") to the probes, this manager's answers (", mine[0], ", ", mine[1], ")");
  }

  std::vector<detail::layout_module> mods(r.count("module count", 16));
  for (auto& mod : mods) {
    mod.name = r.str("module name");
    mod.num_gemms = r.u32();
    mod.forward_group = r.u32();
    mod.backward_group = r.u32();
    if (mod.num_gemms == 0 || mod.num_gemms > detail::state_max_slots / 3)
      r.malformed("module '", mod.name, "' has ", mod.num_gemms, " GEMMs");
  }
  std::vector<detail::layout_bucket> file_buckets(r.count("bucket count", 9));
  for (auto& b : file_buckets) {
    const std::uint8_t d = r.u8();
    if (d > 1) r.malformed("bucket direction ", unsigned{d});
    b = {static_cast<direction>(d), r.u32(), r.u32()};
  }
  const detail::layout_result derived = detail::derive_layout(mods);
  if (derived.buckets != file_buckets)
    r.malformed("the bucket table does not match the one its ", mods.size(), " modules build");
  for (const auto& b : derived.buckets)
    if (b.slots > detail::state_max_slots) r.malformed("a bucket has ", b.slots, " slots");

  const bool adopt = s.modules.empty();
  if (!adopt) {
    auto groups = [&](const auto& mod) {
      return std::pair{s.buckets[mod.forward_base.bucket].group, s.buckets[mod.backward_base.bucket].group};
    };
    detail::require(mods.size() == s.modules.size(), where, ": layout mismatch: the file has ", mods.size(),
                    " modules, this manager registered ", s.modules.size());
    for (std::size_t i = 0; i < mods.size(); ++i) {
      const auto& live = s.modules[i];
      const auto [fg, bg] = groups(live);
      detail::require(mods[i].name == live.name && mods[i].num_gemms == live.num_gemms &&
                          mods[i].forward_group == fg && mods[i].backward_group == bg,
                      where, ": layout mismatch: module ", i, " is '", mods[i].name, "' (", mods[i].num_gemms,
                      " GEMMs, groups ", mods[i].forward_group, "/", mods[i].backward_group, ") in the file, '",
                      live.name, "' (", live.num_gemms, " GEMMs, groups ", fg, "/", bg, ") in this manager");
    }
  }

  const std::uint64_t counters[3] = {r.u64(), r.u64(), r.u64()};
  const bool pending = r.boolean("pending flag");

  // Everything that can fail (parsing, allocation, device uploads) happens before the commit.
  [[maybe_unused]] typename M::recipe_state_type new_recipe{};
  if constexpr (M::is_stateful) {
    new_recipe.reserve(derived.buckets.size());
    for (std::size_t b = 0; b < derived.buckets.size(); ++b) {
      detail::bucket_arrays a;
      a.L = r.u32();
      a.n = r.u32();
      if (a.L != fp.history_length || a.n != derived.buckets[b].slots)
        r.malformed("bucket ", b, " stores ", a.n, " slots of history length ", a.L, ", the layout says ",
                    derived.buckets[b].slots, " slots of length ", fp.history_length);
      const std::size_t n = a.n, rn = n * a.L;
      if (rn / a.L != n || r.remaining() / 4 < 3 * n + rn) r.malformed("bucket ", b, " state runs past the payload");
      a.staging.resize(n);
      a.scale.resize(n);
      a.head.resize(n);
      a.ring.resize(rn);
      r.array32(std::span<float>(a.staging));
      r.array32(std::span<float>(a.scale));
      r.array32(std::span<std::uint32_t>(a.head));
      for (const std::uint32_t x : a.head)
        if (x >= a.L) r.malformed("bucket ", b, " ring head ", x, " is outside [0, ", a.L, ")");
      r.array32(std::span<float>(a.ring));
      std::vector<std::uint32_t> window(rn), front(n), wsize(n);
      const delayed_bucket_view hv{a.n, a.L, a.staging.data(), a.scale.data(), a.ring.data(), a.head.data(),
                                   window.data(), front.data(), wsize.data()};
      for (std::uint32_t j = 0; j < a.n; ++j) detail::rebuild_window(hv, j);
      auto& bk = new_recipe.emplace_back(a.L, m.backend());
      for (std::uint32_t j = 0; j < a.n; ++j) (void)bk.add_slot();
      const delayed_bucket_view dv = bk.view();
      auto& be = bk.backend();
      be.upload(dv.staging, a.staging.data(), n);
      be.upload(dv.scale, a.scale.data(), n);
      be.upload(dv.ring, a.ring.data(), rn);
      be.upload(dv.ring_head, a.head.data(), n);
      be.upload(dv.window, window.data(), rn);
      be.upload(dv.window_front, front.data(), n);
      be.upload(dv.window_size, wsize.data(), n);
    }
  }
  if (!r.at_end()) r.malformed(r.remaining(), " bytes left after the last field");

  decltype(s.modules) new_modules;
  decltype(s.buckets) new_buckets;
  if (adopt) {
    new_modules.reserve(mods.size());
    for (std::size_t i = 0; i < mods.size(); ++i)
      new_modules.push_back({mods[i].name, mods[i].num_gemms, derived.forward_base[i], derived.backward_base[i]});
    new_buckets.resize(derived.buckets.size());
    for (std::size_t b = 0; b < derived.buckets.size(); ++b) {
      new_buckets[b].dir = derived.buckets[b].dir;
      new_buckets[b].group = derived.buckets[b].group;
      new_buckets[b].slots = static_cast<std::uint32_t>(derived.buckets[b].slots);
      new_buckets[b].owners.reserve(new_buckets[b].slots);
    }
    for (std::size_t i = 0; i < mods.size(); ++i) {  // owners as register_module writes them
      const auto mi = static_cast<std::uint64_t>(i) << 32;
      for (std::uint32_t k = 0; k < 3 * mods[i].num_gemms; ++k)
        new_buckets[derived.forward_base[i].bucket].owners.push_back(mi | k);
      for (std::uint32_t k = 0; k < 2 * mods[i].num_gemms; ++k)
        new_buckets[derived.backward_base[i].bucket].owners.push_back(mi | k);
    }
  }

  detail::manager_access::reserve_derived(m, derived.buckets.size());
  // Commit: nothing below throws.
  static_assert(std::is_nothrow_swappable_v<decltype(s.modules)> && std::is_nothrow_swappable_v<decltype(s.buckets)>);
  if (adopt) {
    s.modules.swap(new_modules);
    s.buckets.swap(new_buckets);
  }
  if constexpr (M::is_stateful) s.recipe.swap(new_recipe);
  s.forward_updates.store(counters[0]);
  s.backward_updates.store(counters[1]);
  s.collectives.store(counters[2]);
  s.pending.store(pending);
  detail::manager_access::refresh_derived(m);
}

template <class M>
void load_state(M& m, const std::vector<std::uint8_t>& file, const std::string& where = "load_state") {
  load_state(m, std::span<const std::uint8_t>(file), where);
}

/// Writes the state to `os` (one self-delimiting record: several may follow each other in a stream).
template <class M>
void save_state(const M& m, std::ostream& os) {
  const auto bytes = state_bytes(m);
  os.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  detail::require(static_cast<bool>(os), "save_state(stream): writing ", bytes.size(), " bytes failed");
}

/// Reads one record written by save_state(m, os) from `is`, leaving `is` after it.
template <class M>
void load_state(M& m, std::istream& is) {
  const std::string where = "load_state(stream)";
  std::vector<std::uint8_t> bytes(detail::state_header_bytes);
  is.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<std::size_t>(is.gcount()));
  if (bytes.size() < detail::state_header_bytes) {
    (void)detail::verify_frame(bytes, where);  // reports bad magic or truncation
  }
  // Validate the header before trusting its size; verify_frame would stop at "truncated".
  detail::byte_reader h(std::span<const std::uint8_t>(bytes).subspan(16), where);
  const std::uint64_t payload = h.u64();
  const std::uint64_t stored = h.u64();
  const bool header_ok = stored == detail::fnv1a64(std::span<const std::uint8_t>(bytes).first(24));
  if (header_ok) {
    std::uint64_t left = payload + detail::state_trailer_bytes;
    char buf[1 << 16];
    while (left != 0 && is) {
      const std::size_t want = left < sizeof buf ? static_cast<std::size_t>(left) : sizeof buf;
      is.read(buf, static_cast<std::streamsize>(want));
      bytes.insert(bytes.end(), buf, buf + is.gcount());
      left -= static_cast<std::uint64_t>(is.gcount());
    }
  }
  load_state(m, std::span<const std::uint8_t>(bytes), where);
}

/// Writes the state to `path` crash-safely: temporary file in the same directory, fsync, rename.
template <class M>
void save_state(const M& m, const std::filesystem::path& path) {
  detail::write_file_atomically(path, state_bytes(m), "save_state");
}

/// Loads the state written by save_state(m, path); see load_state(m, bytes) for the rules.
template <class M>
void load_state(M& m, const std::filesystem::path& path) {
  const auto bytes = detail::read_file(path, "load_state");
  load_state(m, std::span<const std::uint8_t>(bytes), "load_state('" + path.string() + "')");
}

}  // namespace tequant
