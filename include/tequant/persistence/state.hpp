// SPDX-License-Identifier: Apache-2.0
// Save and load a quantization_manager's complete state through its parts: the recipe (name, params,
// identity, per-bucket state), the slot table (modules and buckets), the counters and the pending flag.
//
// File layout (every integer little-endian, floats as their IEEE bit patterns):
//   header   "TQSTATE\0" | u32 version | u32 0 | u64 payload bytes | u64 FNV-1a 64 of the 24 bytes before
//   payload  version 2: four sections, each u32 tag | u64 length | bytes, in this order:
//              'RCPE' recipe name, params (the recipe's visit_params), identity (its visit_identity)
//              'SLOT' the slot table (modules; buckets as a check)
//              'CTRS' u64 forward updates, backward updates, collectives | u8 pending
//              'BKTS' u32 bucket count | each bucket's state as the recipe saves it (stateful recipes)
//            version 1 (read only): the same fields without tags and lengths, identity only for a
//              stateful recipe, bucket states without their count
//   trailer  u64 FNV-1a 64 of the payload
// The header has its own checksum so that a damaged size or version field is reported as damage and
// not as "truncated" or "another version". Loading parses and verifies everything into temporaries and
// then commits with noexcept swaps: on any error the live state is untouched (strong guarantee).
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
#include "tequant/slot_table.hpp"

namespace tequant {

/// The version this build writes. It reads this one and every earlier one.
inline constexpr std::uint32_t state_format_version = 2;

namespace detail {

inline constexpr std::uint8_t state_magic[8] = {'T', 'Q', 'S', 'T', 'A', 'T', 'E', 0};
inline constexpr std::size_t state_header_bytes = 32;
inline constexpr std::size_t state_trailer_bytes = 8;

constexpr std::uint32_t section_tag(const char (&s)[5]) noexcept {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(s[0])) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[1])) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[2])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(s[3])) << 24;
}
inline constexpr std::uint32_t recipe_section = section_tag("RCPE"), slots_section = section_tag("SLOT"),
                               counters_section = section_tag("CTRS"), buckets_section = section_tag("BKTS");

/// Everything a state file holds, parsed and checked, not yet committed.
template <class M>
struct parsed_state {
  detail::slot_table table;
  typename M::recipe_state_type buckets{};
  std::uint64_t counters[3] = {};
  bool pending = false;
};

template <class M>
void check_quiescent(M& m, const std::string& where) {
  const manager_stats s = m.stats();
  require(s.autocast_depth == 0, where, ": called inside an autocast region (depth ", s.autocast_depth,
          "); load between steps");
  require(s.scope_depth == 0, where, ": called inside a backward scope (depth ", s.scope_depth, "); load between steps");
  manager_access::frames(m).require_quiescent(where);
}

/// Checks magic, header checksum, version, size and payload checksum; returns the version and payload.
inline std::pair<std::uint32_t, std::span<const std::uint8_t>> verify_frame(std::span<const std::uint8_t> file,
                                                                            const std::string& where) {
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
  require(stored == fnv1a64(file.first(24)), where, ": corrupted header (header checksum mismatch)");
  require(version >= 1 && version <= state_format_version, where, ": unsupported format version ", version,
          " (this build reads versions 1 to ", state_format_version, ")");
  require(reserved == 0, where, ": unsupported header flags ", reserved, " (version ", version, " writes 0)");
  const std::uint64_t total = state_header_bytes + payload + state_trailer_bytes;
  require(payload <= have && have >= total, where, ": truncated: ", have, " bytes, the header announces ", total);
  require(have == total, where, ": ", have - total, " unexpected trailing bytes after the state (", total,
          " expected)");
  const auto body = file.subspan(state_header_bytes, static_cast<std::size_t>(payload));
  byte_reader t(file.subspan(state_header_bytes + body.size()), where);
  require(t.u64() == fnv1a64(body), where, ": corrupted payload (checksum mismatch)");
  return {version, body};
}

inline std::vector<std::uint8_t> frame_payload(const std::vector<std::uint8_t>& payload) {
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

/// Appends one section: tag, length, then what `body` writes.
template <class Body>
void write_section(byte_writer& w, std::uint32_t tag, Body&& body) {
  byte_writer s;
  body(s);
  w.u32(tag);
  w.u64(s.bytes().size());
  w.raw(s.bytes());
}

/// A reader over the next section, which must carry `tag`.
inline byte_reader next_section(byte_reader& r, std::uint32_t tag, const char* name) {
  const std::uint32_t got = r.u32();
  if (got != tag) r.malformed("expected the ", name, " section, found tag ", got);
  const std::uint64_t n = r.u64();
  if (n > r.remaining()) r.malformed("the ", name, " section claims ", n, " bytes, only ", r.remaining(), " remain");
  return r.sub(static_cast<std::size_t>(n));
}

/// The recipe's name, params and identity: checked against the manager's (by field, bit-exact).
template <class M>
void read_recipe(byte_reader& r, const M& m, bool with_identity, const std::string& where) {
  using Recipe = typename M::recipe_type;
  const std::string name = r.str("recipe name");
  require(name == Recipe::name, where, ": recipe mismatch: the file holds '", name, "' state, this manager uses '",
          Recipe::name, "'");
  typename M::params_type fp = m.params(), live = m.params();
  Recipe::visit_params(fp, [&](const char* field, auto& v) { read_field(r, field, v); });
  const std::string diff = first_param_difference<Recipe>(fp, live);
  require(diff.empty(), where, ": recipe parameter mismatch (", Recipe::name, "): ", diff);
  if constexpr (requires { Recipe::visit_identity([](const char*, float&) {}); }) {
    if (with_identity) {
      Recipe::visit_identity([&](const char* field, auto& mine) {
        auto theirs = mine;
        read_field(r, field, theirs);
        require(same_field(theirs, mine), where, ": recipe mismatch: the file's ", field, " is ",
                param_to_string(theirs), ", this manager's is ", param_to_string(mine),
                " (another window algorithm or recipe variant)");
      });
    }
  }
}

template <class M>
void write_recipe(byte_writer& w, const M& m) {
  using Recipe = typename M::recipe_type;
  w.str(Recipe::name);
  auto params = m.params();
  Recipe::visit_params(params, [&](const char*, auto& v) { write_field(w, v); });
  if constexpr (requires { Recipe::visit_identity([](const char*, float&) {}); })
    Recipe::visit_identity([&](const char*, auto& v) { write_field(w, v); });
}

template <class M>
void read_counters(byte_reader& r, parsed_state<M>& s) {
  for (std::uint64_t& c : s.counters) c = r.u64();
  s.pending = r.boolean("pending flag");
}

/// Version 2: four tagged sections.
template <class M>
parsed_state<M> parse_v2(std::span<const std::uint8_t> payload, M& m, const std::string& where) {
  using part = typename manager_access::template recipe_part_t<M>;
  byte_reader r(payload, where);
  parsed_state<M> s;
  {
    byte_reader sec = next_section(r, recipe_section, "recipe");
    read_recipe(sec, m, true, where);
    sec.expect_end("recipe section");
  }
  {
    byte_reader sec = next_section(r, slots_section, "slot table");
    s.table = slot_table::load(sec);
    sec.expect_end("slot table section");
  }
  {
    byte_reader sec = next_section(r, counters_section, "counters");
    read_counters(sec, s);
    sec.expect_end("counters section");
  }
  {
    byte_reader sec = next_section(r, buckets_section, "bucket states");
    if constexpr (M::is_stateful) s.buckets = part::load(sec, m.params(), s.table, m.backend());
    sec.expect_end("bucket states section");
  }
  r.expect_end("payload");
  return s;
}

/// Version 1 (tequant 0.1): the same fields, untagged.
template <class M>
parsed_state<M> parse_v1(std::span<const std::uint8_t> payload, M& m, const std::string& where) {
  using part = typename manager_access::template recipe_part_t<M>;
  byte_reader r(payload, where);
  parsed_state<M> s;
  read_recipe(r, m, M::is_stateful, where);
  s.table = slot_table::load(r);
  read_counters(r, s);
  if constexpr (M::is_stateful) s.buckets = part::load_each(r, m.params(), s.table, s.table.bucket_count(), m.backend());
  r.expect_end("payload");
  return s;
}

}  // namespace detail

/// The manager's complete state as a state file image (the current version). Call it between steps:
/// inside a step it records the half-accumulated staging amaxes of that step. Host-syncs on device
/// backends.
template <class M>
std::vector<std::uint8_t> state_bytes(const M& m) {
  auto& mm = const_cast<M&>(m);  // read only
  const auto& table = detail::manager_access::table(mm);
  const manager_stats st = m.stats();
  detail::byte_writer w;
  detail::write_section(w, detail::recipe_section, [&](detail::byte_writer& s) { detail::write_recipe(s, m); });
  detail::write_section(w, detail::slots_section, [&](detail::byte_writer& s) { table.save(s); });
  detail::write_section(w, detail::counters_section, [&](detail::byte_writer& s) {
    s.u64(st.forward_updates);
    s.u64(st.backward_updates);
    s.u64(st.collectives);
    s.u8(st.pending ? 1 : 0);
  });
  detail::write_section(w, detail::buckets_section,
                        [&](detail::byte_writer& s) { detail::manager_access::recipe(mm).save(s); });
  return detail::frame_payload(w.bytes());
}

/// Replaces the manager's state by the one in `file` (a state_bytes image of any version). The
/// manager must be between steps (no open region, scope or frame, no unreplayed snapshot). A manager
/// without modules adopts the file's layout; one with modules must have registered exactly the
/// file's modules (names, GEMM counts, groups, order). Any error names its class (bad magic, corrupted
/// header, unsupported version, truncated, trailing bytes, corrupted payload, recipe mismatch, recipe
/// parameter mismatch, layout mismatch, malformed payload, manager busy) and leaves the live state
/// untouched.
template <class M>
void load_state(M& m, std::span<const std::uint8_t> file, const std::string& where = "load_state") {
  detail::check_quiescent(m, where);
  const auto [version, payload] = detail::verify_frame(file, where);
  detail::parsed_state<M> s = version == 1 ? detail::parse_v1(payload, m, where) : detail::parse_v2(payload, m, where);
  auto& table = detail::manager_access::table(m);
  const bool adopt = table.module_count() == 0;
  if (!adopt) {
    const std::string diff = table.layout_difference(s.table);
    detail::require(diff.empty(), where, ": layout mismatch: ", diff);
  }
  detail::manager_access::new_epoch(m);  // cast handles re-bind at their next cast
  // Commit: nothing below throws.
  if (adopt) table.swap(s.table);
  detail::manager_access::recipe(m).commit(s.buckets);
  detail::manager_access::restore(m, s.counters, s.pending);
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
