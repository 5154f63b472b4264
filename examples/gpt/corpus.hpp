// SPDX-License-Identifier: Apache-2.0
// The GPT example's data: one frozen text file, read as bytes (a character-level model), cut into
// 4 KiB chunks of which every 10th is validation and the rest training. (The file is headers, then
// docs: a plain 90/10 cut would validate on markdown after training on C++.)
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpt {

class corpus {
 public:
  explicit corpus(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read the corpus " + path);
    text_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    std::array<bool, 256> seen{};
    for (unsigned char c : text_) seen[c] = true;
    id_of_.fill(0);
    for (int c = 0; c < 256; ++c)
      if (seen[c]) {
        id_of_[c] = static_cast<std::uint32_t>(char_of_.size());
        char_of_.push_back(static_cast<char>(c));
      }
    for (std::size_t at = 0; at < text_.size(); at += chunk) {
      auto& part = (at / chunk) % 10 == 9 ? val_ : train_;
      for (std::size_t i = at; i < std::min(text_.size(), at + chunk); ++i)
        part.push_back(id_of_[static_cast<unsigned char>(text_[i])]);
    }
  }

  std::size_t vocab() const { return char_of_.size(); }
  std::size_t bytes() const { return text_.size(); }
  std::size_t train_size() const { return train_.size(); }
  std::size_t validation_size() const { return val_.size(); }
  char to_char(std::uint32_t id) const { return char_of_.at(id); }
  const std::vector<std::uint32_t>& validation_ids() const { return val_; }

  /// A batch of `batch` windows: inputs x and next-character targets y, each batch*T ids.
  struct batch_ids {
    std::vector<std::uint32_t> x, y;
  };
  /// Random windows of the training part.
  batch_ids train_batch(std::mt19937& rng, std::size_t batch, std::size_t T) const {
    if (train_.size() < T + 2) throw std::runtime_error("corpus too small for context " + std::to_string(T));
    std::uniform_int_distribution<std::size_t> start(0, train_.size() - T - 1);
    batch_ids b;
    for (std::size_t s = 0; s < batch; ++s) append(b, train_, start(rng), T);
    return b;
  }
  /// `count` windows spread evenly over the validation part (always the same ones).
  batch_ids validation_batch(std::size_t count, std::size_t T) const {
    const std::size_t n = validation_size();
    if (n < T + 2) throw std::runtime_error("validation part too small for context " + std::to_string(T));
    batch_ids b;
    for (std::size_t s = 0; s < count; ++s) append(b, val_, (n - T - 1) * s / (count > 1 ? count - 1 : 1), T);
    return b;
  }

 private:
  static void append(batch_ids& b, const std::vector<std::uint32_t>& ids, std::size_t at, std::size_t T) {
    for (std::size_t t = 0; t < T; ++t) {
      b.x.push_back(ids[at + t]);
      b.y.push_back(ids[at + t + 1]);
    }
  }

  std::string text_;
  static constexpr std::size_t chunk = 4096;
  std::vector<std::uint32_t> train_, val_;
  std::array<std::uint32_t, 256> id_of_{};
  std::vector<char> char_of_;
};

}  // namespace gpt
