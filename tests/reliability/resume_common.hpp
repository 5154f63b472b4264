// SPDX-License-Identifier: Apache-2.0
// What the persistence test and its fresh-process helper agree on: the manager type, its params,
// and the format of the helper's result file.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"
#include "toy_model.hpp"

namespace rel {

// autocast_entry without backward scopes: the backward update is still pending when a step ends,
// so the pending flag has to survive the save/load round trip too.
using resume_manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::autocast_entry>;

inline tequant::delayed_params resume_params() {
  tequant::delayed_params p;
  p.history_length = 5;
  p.margin = 1;
  return p;
}

inline void configure(toy_model<resume_manager>& model) { model.use_scope = false; }

/// Runs steps [first, first + n) and returns losses (as bits) ++ weights ++ final state bytes.
inline std::vector<std::uint8_t> continue_run(resume_manager& m, toy_model<resume_manager>& model, int first, int n);

inline std::vector<std::uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_all(const std::filesystem::path& p, const std::vector<std::uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace rel

#include "tequant/persistence/state.hpp"

inline std::vector<std::uint8_t> rel::continue_run(resume_manager& m, toy_model<resume_manager>& model, int first,
                                                   int n) {
  std::vector<std::uint8_t> out;
  for (int k = first; k < first + n; ++k) {
    const float loss = model.step(k);
    std::uint32_t bits;
    std::memcpy(&bits, &loss, 4);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(bits >> (8 * i)));
  }
  const auto w = model.weight_bytes();
  out.insert(out.end(), w.begin(), w.end());
  const auto s = tequant::state_bytes(m);
  out.insert(out.end(), s.begin(), s.end());
  return out;
}
