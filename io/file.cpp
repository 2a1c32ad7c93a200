#include "io/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace tg::io {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Closes the descriptor and removes the temporary file unless the write completed.
struct TempFile {
  std::string path;
  int fd = -1;
  bool done = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!done) ::unlink(path.c_str());
  }
};

}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TG_CHECK(fd >= 0, "read_file", "cannot open '", path, "': ", errno_text());
  std::vector<uint8_t> data;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) data.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string why = errno_text();
      ::close(fd);
      fail("read_file", "cannot read '", path, "': ", why);
    }
    if (n == 0) break;
    data.insert(data.end(), buf, buf + n);
  }
  ::close(fd);
  return data;
}

void write_file_atomic(const std::string& path, const std::function<void(const ChunkWriter&)>& produce) {
  TempFile tmp{path + ".tmp"};
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TG_CHECK(tmp.fd >= 0, "save", "cannot create '", tmp.path, "': ", errno_text(), " ('", path,
           "' is left unchanged)");
  ChunkWriter write = [&](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(tmp.fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      TG_CHECK(n > 0, "save", "cannot write '", tmp.path, "': ", errno_text(), " ('", path,
               "' is left unchanged)");
      p += n;
      size -= static_cast<size_t>(n);
    }
  };
  produce(write);
  // The data must be on disk before the rename makes it visible under the real name.
  TG_CHECK(::fsync(tmp.fd) == 0, "save", "fsync of '", tmp.path, "' failed: ", errno_text());
  int rc = ::close(tmp.fd);
  tmp.fd = -1;
  TG_CHECK(rc == 0, "save", "closing '", tmp.path, "' failed: ", errno_text());
  TG_CHECK(::rename(tmp.path.c_str(), path.c_str()) == 0, "save", "cannot rename '", tmp.path, "' to '",
           path, "': ", errno_text());
  tmp.done = true;
  // Persist the rename itself (best effort: some filesystems refuse fsync on directories).
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  write_file_atomic(path, [&](const ChunkWriter& write) { write(content.data(), content.size()); });
}

}  // namespace tg::io
