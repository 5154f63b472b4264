// SPDX-License-Identifier: Apache-2.0
// CHECK_TEQUANT_ERROR(expr, text): expr throws tequant::error whose message starts with "tequant: "
// and contains `text`.
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "tequant/error.hpp"

namespace rel {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tequant::error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a tequant::error> ") + e.what();
  }
  return "<no exception>";
}

}  // namespace rel

#define CHECK_TEQUANT_ERROR(expr, text)                                             \
  do {                                                                              \
    const std::string tq_msg_ = ::rel::error_of([&] { expr; });                     \
    CHECK_MESSAGE(tq_msg_.rfind("tequant: ", 0) == 0, "message: ", tq_msg_);        \
    CHECK_MESSAGE(tq_msg_.find(text) != std::string::npos, "message: ", tq_msg_);   \
  } while (0)
