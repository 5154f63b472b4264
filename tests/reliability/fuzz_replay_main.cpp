// SPDX-License-Identifier: Apache-2.0
// Runs a fuzzer harness without libFuzzer: every file of the given corpus directories, then
// a fixed number of inputs from a seeded generator (a regression test for every compiler).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  std::size_t files = 0;
  for (int i = 1; i < argc; ++i)
    for (const auto& e : std::filesystem::directory_iterator(argv[i])) {
      std::ifstream in(e.path(), std::ios::binary);
      const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++files;
    }
  std::mt19937 rng(20240601);
  constexpr int generated = 400;
  for (int n = 0; n < generated; ++n) {
    std::vector<std::uint8_t> bytes(2 + 2 * (rng() % 120));
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  }
  std::printf("%s: %zu corpus files and %d generated inputs passed\n", argv[0], files, generated);
  return files == 0 ? 1 : 0;
}
