// SPDX-License-Identifier: Apache-2.0
// A downstream program: it includes the umbrella header and checks one conversion.
#include <tequant/tequant.hpp>

#include <cstdio>

int main() {
  const bool ok = tequant::encode_e4m3(1.0f) == 0x38 && tequant::decode_e4m3(0x38) == 1.0f;
  std::printf("tequant %d.%d.%d consumer: %s\n", TEQUANT_VERSION_MAJOR, TEQUANT_VERSION_MINOR,
              TEQUANT_VERSION_PATCH, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
