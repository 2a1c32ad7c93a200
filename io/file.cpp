#include "io/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/error.h"

namespace tg::io {
namespace {

namespace fs = std::filesystem;

// A temporary unlocked and untouched this long belongs to a save that died: the only unlocked
// moment of a live one is between its creation and its flock, microseconds.
constexpr time_t kStaleSeconds = 10;
const std::string kTempTag = ".tg-tmp-";

std::string errno_text() { return std::strerror(errno); }

// Splits a path into its folder ("." when none) and its last component.
std::pair<std::string, std::string> split(const std::string& path) {
  fs::path p(path);
  std::string dir = p.parent_path().string();
  return {dir.empty() ? "." : dir, p.filename().string()};
}

std::string temp_prefix(const std::string& name) { return "." + name + kTempTag; }

// Removes the temporaries of earlier saves of `name` in `dir` that no live process holds.
void remove_stale_temps(const std::string& dir, const std::string& name) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string prefix = temp_prefix(name);
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    const std::string path = dir + "/" + e->d_name;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &st) == 0 && ::time(nullptr) - st.st_mtime > kStaleSeconds)
      stale.push_back(path);
    ::close(fd);
  }
  ::closedir(d);
  std::error_code ec;  // best effort: another save may be removing the same one
  for (const auto& p : stale) fs::remove_all(p, ec);
}

void fsync_dir(const std::string& dir, const std::string& what) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TG_CHECK(fd >= 0, "save", "cannot open folder '", dir, "' to persist ", what, ": ", errno_text());
  int rc = ::fsync(fd);
  std::string why = rc == 0 ? "" : errno_text();
  const bool unsupported = rc != 0 && (errno == EINVAL || errno == ENOTSUP);  // some filesystems refuse
  ::close(fd);
  TG_CHECK(rc == 0 || unsupported, "save", "fsync of folder '", dir, "' failed: ", why, " (", what,
           " may not survive a crash)");
}

// Writes all of `produce`'s chunks to fd, then fsyncs it; `path` names it in errors.
void write_all(int fd, const std::string& path, const std::string& target, const Producer& produce) {
  ChunkWriter write = [&](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      TG_CHECK(n > 0, "save", "cannot write '", path, "': ", errno_text(), " ('", target, "' is left unchanged)");
      p += n;
      size -= static_cast<size_t>(n);
    }
  };
  produce(write);
  // The data must be on disk before a rename makes it visible under the real name.
  TG_CHECK(::fsync(fd) == 0, "save", "fsync of '", path, "' failed: ", errno_text(), " ('", target,
           "' is left unchanged)");
}

// A locked temporary file or folder beside the target, removed unless committed.
struct Temp {
  std::string path;
  int fd = -1;
  bool folder = false, committed = false;
  ~Temp() {
    if (!committed && !path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
    if (fd >= 0) ::close(fd);  // releases the lock, after the removal
  }
};

void lock(Temp& t, const std::string& target) {
  TG_CHECK(::flock(t.fd, LOCK_EX) == 0, "save", "cannot lock '", t.path, "': ", errno_text(), " ('", target,
           "' is left unchanged)");
}

void create_temp_file(Temp& t, const std::string& dir, const std::string& name, const std::string& target) {
  std::string templ = dir + "/" + temp_prefix(name) + "XXXXXX";
  t.fd = ::mkostemp(templ.data(), O_CLOEXEC);
  TG_CHECK(t.fd >= 0, "save", "cannot create a temporary file in '", dir, "': ", errno_text(), " ('", target,
           "' is left unchanged)");
  t.path = templ;
  lock(t, target);
}

void create_temp_folder(Temp& t, const std::string& parent, const std::string& name, const std::string& target) {
  std::string templ = parent + "/" + temp_prefix(name) + "XXXXXX";
  TG_CHECK(::mkdtemp(templ.data()) != nullptr, "save", "cannot create a temporary folder in '", parent, "': ",
           errno_text(), " ('", target, "' is left unchanged)");
  t.path = templ;
  t.folder = true;
  t.fd = ::open(templ.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TG_CHECK(t.fd >= 0, "save", "cannot open '", templ, "': ", errno_text());
  lock(t, target);
}

// Makes dst (not existing) hold what src holds: hard links for files (a copy where the
// filesystem refuses them), new folders for folders, copies of symbolic links.
void carry_over(const fs::path& src, const fs::path& dst) {
  const fs::file_status st = fs::symlink_status(src);
  std::error_code ec;
  if (fs::is_symlink(st)) {
    fs::copy_symlink(src, dst);
  } else if (fs::is_directory(st)) {
    fs::create_directory(dst, src);
    for (const auto& e : fs::directory_iterator(src)) carry_over(e.path(), dst / e.path().filename());
  } else if (fs::is_regular_file(st)) {
    fs::create_hard_link(src, dst, ec);
    if (ec) fs::copy_file(src, dst);
  } else if (fs::exists(st)) {
    fail("save", "cannot carry '", src.string(), "' (neither a file, a folder nor a link) into the new folder");
  }
}

// Reads all of fd (opened O_NONBLOCK, so that a FIFO does not block the open) and closes it.
std::vector<uint8_t> read_fd(int fd, const std::string& path, size_t max_bytes) {
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  TG_CHECK(::fstat(fd, &st) == 0, "read_file", "cannot stat '", path, "': ", errno_text());
  TG_CHECK(S_ISREG(st.st_mode), "read_file", "'", path, "' is not a regular file (",
           S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "not a file",
           "): wants a file");
  auto too_large = [&](uint64_t size) {
    fail("read_file", "'", path, "' holds ", size, " bytes, more than the ", max_bytes, " a file of its kind may hold");
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) too_large(static_cast<uint64_t>(st.st_size));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  std::vector<uint8_t> data;
  data.reserve(static_cast<size_t>(st.st_size));
  uint8_t buf[1 << 16];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    TG_CHECK(n >= 0, "read_file", "cannot read '", path, "': ", errno_text());
    if (n == 0) break;
    if (data.size() + static_cast<size_t>(n) > max_bytes) too_large(data.size() + static_cast<size_t>(n));  // it grew
    data.insert(data.end(), buf, buf + n);
  }
  return data;
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TG_CHECK(fd >= 0, "read_file", "cannot open '", path, "': ", errno_text());
  return read_fd(fd, path, max_bytes);
}

void write_file_atomic(const std::string& path, const Producer& produce, unsigned new_mode) {
  const auto [dir, name] = split(path);
  TG_CHECK(!name.empty() && name != "." && name != "..", "save", "'", path, "' names no file");
  remove_stale_temps(dir, name);
  Temp tmp;
  create_temp_file(tmp, dir, name, path);
  write_all(tmp.fd, tmp.path, path, produce);
  struct stat st {};
  const mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : static_cast<mode_t>(new_mode);
  TG_CHECK(::fchmod(tmp.fd, mode) == 0, "save", "cannot set the mode of '", tmp.path, "': ", errno_text());
  TG_CHECK(::rename(tmp.path.c_str(), path.c_str()) == 0, "save", "cannot rename '", tmp.path, "' to '", path,
           "': ", errno_text(), " ('", path, "' is left unchanged)");
  tmp.committed = true;
  fsync_dir(dir, "the rename of '" + path + "'");
}

void write_file_atomic(const std::string& path, const std::string& content, unsigned new_mode) {
  write_file_atomic(path, [&](const ChunkWriter& write) { write(content.data(), content.size()); }, new_mode);
}

void FolderWriter::write(const std::string& name, const Producer& produce) {
  TG_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", "save", "'", name,
           "' is not a file name");
  TG_CHECK(written_.insert(name).second, "save", "'", name, "' is written twice into '", dir_, "'");
  const std::string path = dir_ + "/" + name;
  int fd = ::openat(dir_fd_, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  TG_CHECK(fd >= 0, "save", "cannot create '", path, "': ", errno_text());
  try {
    write_all(fd, path, dir_, produce);
  } catch (...) {
    ::close(fd);
    throw;
  }
  TG_CHECK(::close(fd) == 0, "save", "closing '", path, "' failed: ", errno_text());
}

void FolderWriter::write(const std::string& name, const std::string& content) {
  write(name, [&](const ChunkWriter& w) { w(content.data(), content.size()); });
}

void write_folder_atomic(const std::string& dir, const std::function<void(FolderWriter&)>& produce,
                         const std::function<bool(const std::string&)>& replaces) try {
  fs::path target = fs::weakly_canonical(fs::absolute(dir));
  if (target.filename().empty()) target = target.parent_path();  // "out/adapter/"
  const std::string parent = target.parent_path().string(), name = target.filename().string();
  TG_CHECK(!name.empty() && target != target.root_path(), "save", "cannot write '", dir, "' as a folder");
  std::error_code ec;
  fs::create_directories(parent, ec);
  TG_CHECK(!ec, "save", "cannot create folder '", parent, "': ", ec.message());
  const bool existed = fs::exists(fs::symlink_status(target));
  TG_CHECK(!existed || fs::is_directory(fs::symlink_status(target)), "save", "'", dir, "' exists and is not a folder");
  remove_stale_temps(parent, name);

  Temp tmp;
  create_temp_folder(tmp, parent, name, dir);
  FolderWriter writer(tmp.fd, tmp.path);
  produce(writer);
  if (existed) {
    for (const auto& e : fs::directory_iterator(target)) {
      const std::string entry = e.path().filename().string();
      if (writer.written().count(entry) || (replaces && replaces(entry))) continue;
      carry_over(e.path(), fs::path(tmp.path) / entry);
    }
  }
  struct stat st {};
  const mode_t mode = existed && ::stat(target.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0755;
  TG_CHECK(::fchmod(tmp.fd, mode) == 0, "save", "cannot set the mode of '", tmp.path, "': ", errno_text());
  TG_CHECK(::fsync(tmp.fd) == 0, "save", "fsync of '", tmp.path, "' failed: ", errno_text());
  // A process working inside the old folder would be left in a removed one: it moves to the new.
  const fs::path cwd = fs::current_path(ec);
  const bool cwd_inside = !ec && existed && (cwd == target || cwd.string().starts_with(target.string() + "/"));
  // A folder saved at the same moment by another process may have appeared: swap with it then.
  const bool renamed = !existed && ::rename(tmp.path.c_str(), target.c_str()) == 0;
  TG_CHECK(renamed || existed || errno == EEXIST || errno == ENOTEMPTY, "save", "cannot rename '", tmp.path,
           "' to '", dir, "': ", errno_text());
  tmp.committed = renamed;
  if (!renamed)
    TG_CHECK(::renameat2(AT_FDCWD, tmp.path.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0, "save",
             "cannot swap the new '", dir, "' in: ", errno_text(),
             errno == EBUSY || errno == EXDEV ? " (a mount point cannot be swapped: save into a folder inside it)" : "",
             " ('", dir, "' is left unchanged)");
  if (cwd_inside) std::filesystem::current_path(cwd, ec);
  fsync_dir(parent, "the new '" + dir + "'");
  // After an exchange the temporary name holds the old folder, which ~Temp removes.
} catch (const fs::filesystem_error& e) {  // from carrying entries over: a tg::Error like the rest
  fail("save", "cannot write folder '", dir, "': ", e.what(), " ('", dir, "' is left unchanged)");
}

Folder::Folder(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TG_CHECK(fd_ >= 0, "read_file", "cannot open folder '", path, "': ", errno_text());
}

Folder::~Folder() { ::close(fd_); }

bool Folder::has_file(const std::string& name) const {
  struct stat st {};
  return ::fstatat(fd_, name.c_str(), &st, 0) == 0 && S_ISREG(st.st_mode);
}

bool Folder::exists(const std::string& name) const {
  struct stat st {};
  return ::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

std::vector<uint8_t> Folder::read(const std::string& name, size_t max_bytes) const {
  int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TG_CHECK(fd >= 0, "read_file", "cannot open '", path_of(name), "': ", errno_text());
  return read_fd(fd, path_of(name), max_bytes);
}

File Folder::open(const std::string& name) const {
  int fd = ::openat(fd_, name.c_str(), O_RDONLY | O_CLOEXEC);
  TG_CHECK(fd >= 0, "read_file", "cannot open '", path_of(name), "': ", errno_text());
  return File(fd, path_of(name));
}

File::File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {
  struct stat st {};
  const bool stated = ::fstat(fd_, &st) == 0;
  if (!stated || !S_ISREG(st.st_mode)) {
    const std::string why = stated ? "not a regular file" : errno_text();
    ::close(fd_);
    fail("read_file", "cannot read '", path_, "': ", why);
  }
  size_ = static_cast<uint64_t>(st.st_size);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint for read-ahead; failure changes nothing
}

std::shared_ptr<uint8_t> File::copy_to_memory(uint64_t offset, uint64_t n) const {
  TG_CHECK(n > 0 && offset <= size_ && n <= size_ - offset, "read_file", "bytes [", offset, ", +", n, ") of '", path_,
           "' are not inside its ", size_, " bytes");
  const int mem = ::memfd_create("tapegrad-weights", MFD_CLOEXEC);
  if (mem < 0) return nullptr;
  struct Closer {  // the mapping keeps the memory
    int fd;
    ~Closer() { ::close(fd); }
  } closer{mem};
  TG_CHECK(::ftruncate(mem, static_cast<off_t>(n)) == 0, "read_file", "cannot hold ", n, " bytes of '", path_,
           "' in memory: ", errno_text());
  auto in = static_cast<off_t>(offset);
  for (uint64_t left = n; left > 0;) {
    const ssize_t got = ::sendfile(mem, fd_, &in, static_cast<size_t>(std::min<uint64_t>(left, uint64_t{1} << 30)));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EINVAL || errno == ENOSYS) && left == n) return nullptr;  // not into a memfd here
    TG_CHECK(got >= 0, "read_file", "cannot copy '", path_, "' into memory: ", errno_text());
    TG_CHECK(got > 0, "read_file", "'", path_, "' ends at byte ", in, ", before the ", left,
             " bytes wanted there (it was truncated while being read)");
    left -= static_cast<uint64_t>(got);
  }
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mem, 0);
  TG_CHECK(p != MAP_FAILED, "read_file", "cannot map the copy of '", path_, "': ", errno_text());
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [n](uint8_t* q) { ::munmap(q, n); });
}

File::File(File&& other) noexcept : fd_(other.fd_), size_(other.size_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::read_at(uint64_t offset, void* out, size_t n) const {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    TG_CHECK(got >= 0, "read_file", "cannot read '", path_, "': ", errno_text());
    TG_CHECK(got > 0, "read_file", "'", path_, "' ends at byte ", offset, ", before the ", n,
             " bytes wanted there (it was truncated while being read)");
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

}  // namespace tg::io
