// SPDX-License-Identifier: Apache-2.0
// Crash-safe file replacement (POSIX): write a temporary in the same directory, fsync, rename over
// the target, fsync the directory. A reader sees the old file or the new one, never a mix.
#pragma once
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tequant/error.hpp"

namespace tequant::detail {

/// A tag for a temporary file's name. O_EXCL keeps the file ours whatever the tag; randomness only
/// keeps concurrent writers from colliding (without <random>, which costs every includer 9k lines).
inline std::uint64_t temporary_tag(int attempt) noexcept {
  std::uint64_t tag = 0;
  if (::getrandom(&tag, sizeof tag, GRND_NONBLOCK) == static_cast<::ssize_t>(sizeof tag)) return tag;
  ::timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return (static_cast<std::uint64_t>(t.tv_nsec) << 24) ^ (static_cast<std::uint64_t>(::getpid()) << 8) ^
         static_cast<std::uint64_t>(attempt);
}

[[noreturn]] inline void fail_errno(const char* who, const std::filesystem::path& path, const char* what, int err) {
  fail(who, "('", path.string(), "'): ", what, ": ", std::strerror(err));
}

/// Replaces `path` by `bytes` atomically and durably. On failure the target is untouched, the
/// temporary is removed and a `tequant:` error names the step. A process killed half-way leaves at
/// most a stray `<name>.tqtmp.<hex>` beside the target.
inline void write_file_atomically(const std::filesystem::path& path, std::span<const std::uint8_t> bytes,
                                  const char* who) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    const std::uint64_t tag = temporary_tag(attempt);
    char hex[17];
    for (int i = 0; i < 16; ++i) hex[i] = "0123456789abcdef"[(tag >> (60 - 4 * i)) & 0xF];
    hex[16] = '\0';
    tmp = path.string() + ".tqtmp." + hex;
    // O_EXCL: never write into someone else's file; 0666 & ~umask like any new file.
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) fail_errno(who, path, "cannot create the temporary file", errno);
  }
  if (fd < 0) fail_errno(who, path, "cannot create a unique temporary file", EEXIST);
  auto abandon = [&](const char* what) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail_errno(who, path, what, err);
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ::ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("writing the temporary file failed");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) abandon("fsync of the temporary file failed");
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) abandon("closing the temporary file failed");
  if (::rename(tmp.c_str(), path.c_str()) != 0) abandon("renaming the temporary file into place failed");
  // The rename is durable only once the directory entry is; failing here leaves the new file in place.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int synced = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    if (synced != 0 && err != EINVAL) fail_errno(who, path, "fsync of the directory failed (the new file is in place)", err);
  }
}

/// The whole file, or a `tequant:` error naming it.
inline std::vector<std::uint8_t> read_file(const std::filesystem::path& path, const char* who) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno(who, path, "cannot open", errno);
  std::vector<std::uint8_t> bytes;
  std::uint8_t buf[1 << 16];
  for (;;) {
    const ::ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail_errno(who, path, "read failed", err);
    }
    bytes.insert(bytes.end(), buf, buf + n);
  }
  ::close(fd);
  return bytes;
}

}  // namespace tequant::detail
