// SPDX-License-Identifier: Apache-2.0
// Little-endian byte encoding and the FNV-1a 64 checksum of tequant's state files.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"

namespace tequant::detail {

inline constexpr std::uint64_t fnv64_offset = 14695981039346656037ull;
inline constexpr std::uint64_t fnv64_prime = 1099511628211ull;

/// FNV-1a 64 over bytes (chainable: pass the previous result as `h`).
constexpr std::uint64_t fnv1a64(std::span<const std::uint8_t> bytes, std::uint64_t h = fnv64_offset) noexcept {
  for (const std::uint8_t b : bytes) h = (h ^ b) * fnv64_prime;
  return h;
}

/// Appends fixed-width little-endian values, independent of the host's byte order.
class byte_writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(v); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void f32(float v) { u32(float_bits(v)); }  // bit pattern: NaN payloads and -0 survive
  template <class = void>  // instantiated where used: a TU that saves or loads nothing does not pay for it
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  /// Bulk 32-bit values (float bit patterns or integers), one resize for the whole array.
  template <class T>
  void array32(std::span<const T> v) {
    static_assert(sizeof(T) == 4);
    const std::size_t at = out_.size();
    out_.resize(at + 4 * v.size());
    std::uint8_t* p = out_.data() + at;
    for (const T x : v) {
      std::uint32_t u;
      std::memcpy(&u, &x, 4);  // (not bit_cast: nvcc's front end cannot evaluate it in templates)
      p[0] = static_cast<std::uint8_t>(u);
      p[1] = static_cast<std::uint8_t>(u >> 8);
      p[2] = static_cast<std::uint8_t>(u >> 16);
      p[3] = static_cast<std::uint8_t>(u >> 24);
      p += 4;
    }
  }
  void reserve(std::size_t n) { out_.reserve(n); }
  template <class = void>  // instantiated where used: a TU that saves or loads nothing does not pay for it
  void raw(std::span<const std::uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<std::uint8_t>& bytes() noexcept { return out_; }

 private:
  std::vector<std::uint8_t> out_;
};

/// Reads what byte_writer wrote; running past the end is a `tequant:` error naming `where` (a
/// payload whose checksum matched but whose structure does not: a writer bug or a forged file).
class byte_reader {
 public:
  byte_reader(std::span<const std::uint8_t> in, const std::string& where) : in_(in), where_(where) {}

  std::uint8_t u8() { return take(1)[0]; }
  std::uint32_t u32() {
    const auto b = take(4);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(b[static_cast<std::size_t>(i)]) << (8 * i);
    return v;
  }
  std::uint64_t u64() {
    const auto b = take(8);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(b[static_cast<std::size_t>(i)]) << (8 * i);
    return v;
  }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  float f32() { return bits_float(u32()); }
  template <class = void>  // instantiated where used: a TU that saves or loads nothing does not pay for it
  bool boolean(const char* field) {
    const std::uint8_t v = u8();
    if (v > 1) malformed(field, " is ", static_cast<unsigned>(v), ", not 0 or 1");
    return v == 1;
  }
  template <class = void>  // instantiated where used: a TU that saves or loads nothing does not pay for it
  std::string str(const char* field) {
    const std::uint32_t n = u32();
    if (n > remaining()) malformed(field, " claims ", n, " bytes, only ", remaining(), " remain");
    const auto b = take(n);
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  /// Count of items of `item_bytes` each that must still fit in the payload (so a forged count
  /// cannot make the loader allocate more than the file holds).
  template <class = void>  // instantiated where used: a TU that saves or loads nothing does not pay for it
  std::size_t count(const char* field, std::size_t item_bytes) {
    const std::uint32_t n = u32();
    if (item_bytes != 0 && n > remaining() / item_bytes)
      malformed(field, " is ", n, " but only ", remaining(), " payload bytes remain");
    return n;
  }
  /// Bulk counterpart of array32 (the caller checked that 4 * out.size() bytes remain).
  template <class T>
  void array32(std::span<T> out) {
    static_assert(sizeof(T) == 4);
    const auto b = take(4 * out.size());
    const std::uint8_t* p = b.data();
    for (T& x : out) {
      const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                              static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
      std::memcpy(&x, &u, 4);
      p += 4;
    }
  }
  /// A reader over the next n bytes (the caller checked they remain); this one moves past them.
  byte_reader sub(std::size_t n) { return byte_reader(take(n), where_); }
  /// Bytes left over after a structure that should have been consumed whole are malformed.
  template <class = void>  // instantiated where used: a TU that saves or loads nothing does not pay for it
  void expect_end(const char* what) const {
    if (!at_end()) malformed(remaining(), " bytes left after the last field of the ", what);
  }
  std::size_t remaining() const noexcept { return in_.size() - pos_; }
  bool at_end() const noexcept { return pos_ == in_.size(); }

  template <class... Parts>
  [[noreturn]] void malformed(Parts&&... parts) const {
    fail(where_, ": malformed payload (the checksum matched, the structure does not; written by a different "
         "or faulty writer?): ", std::forward<Parts>(parts)...);
  }

 private:
  template <class = void>  // instantiated where used: a TU that saves or loads nothing does not pay for it
  std::span<const std::uint8_t> take(std::size_t n) {
    if (n > remaining()) malformed("needs ", n, " more bytes at offset ", pos_, ", only ", remaining(), " remain");
    const auto r = in_.subspan(pos_, n);
    pos_ += n;
    return r;
  }

  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
  const std::string& where_;
};

}  // namespace tequant::detail
