// Whole-file reads and crash-safe writes: every save in tapegrad goes through these.
//
// A file is written to a unique temporary beside it (".<name>.tg-tmp-XXXXXX", created with
// O_EXCL and locked while it is written), fsync'ed, renamed over the target and the directory
// fsync'ed. A folder of several files (a peft adapter, a transformers model) is written whole
// into a temporary folder beside it and swapped in with one rename. So concurrent saves to one
// path leave one complete save, a failed save leaves the old file or folder as it was, and a
// reader sees the old version or the new one, never a mix. The temporaries of a save that
// crashed are removed by the next save of the same path (those no live process holds locked).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tg::io {

// What a config, tokenizer or other small file named by a model folder may hold (Gemma's
// tokenizer.json is 33 MB): more is a corrupt or hostile file, not one to read into memory.
inline constexpr size_t kMaxConfigBytes = size_t{256} << 20;

// The file's bytes; tg::Error naming the path when it cannot be read, is not a regular file (a
// FIFO or a device would be read without end) or holds more than max_bytes.
std::vector<uint8_t> read_file(const std::string& path, size_t max_bytes = SIZE_MAX);

// Receives consecutive chunks of a file being written.
using ChunkWriter = std::function<void(const void* data, size_t size)>;
// Writes a file's content by calling the writer it is given once per chunk, so large files are
// never held in memory twice.
using Producer = std::function<void(const ChunkWriter&)>;

// Writes `path` atomically (see above). An existing file keeps its permission bits; a new one
// gets `new_mode` (0600: only this user reads it, as an NCCL id wants).
void write_file_atomic(const std::string& path, const Producer& produce, unsigned new_mode = 0644);
void write_file_atomic(const std::string& path, const std::string& content, unsigned new_mode = 0644);

class FolderWriter;
// Writes folder `dir` as a unit: `produce` writes its files into a fresh temporary folder beside
// it; every entry of an existing `dir` that this save neither writes nor `replaces` (a
// tokenizer, a README, ...) is carried over (hard links, so nothing is copied); then the new
// folder is swapped in by one rename and the old one removed. tg::Error (and `dir` unchanged)
// when any step fails, e.g. when `dir` is a mount point, which cannot be renamed.
void write_folder_atomic(const std::string& dir, const std::function<void(FolderWriter&)>& produce,
                         const std::function<bool(const std::string&)>& replaces = {});

// The files of a folder being written by write_folder_atomic.
class FolderWriter {
 public:
  void write(const std::string& name, const Producer& produce);
  void write(const std::string& name, const std::string& content);
  const std::set<std::string>& written() const { return written_; }

 private:
  friend void write_folder_atomic(const std::string&, const std::function<void(FolderWriter&)>&,
                                  const std::function<bool(const std::string&)>&);
  FolderWriter(int dir_fd, std::string dir) : dir_fd_(dir_fd), dir_(std::move(dir)) {}
  int dir_fd_;
  std::string dir_;
  std::set<std::string> written_;
};


// A folder opened once: the files read through it all come from one version of it, even while
// write_folder_atomic swaps in another (a file the swap has removed since is a tg::Error, never a
// file of the other version).
// A file opened for reading ranges (safetensors shards, read tensor by tensor).
class File {
 public:
  File(int fd, std::string path);  // takes fd
  ~File();
  File(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File& operator=(File&&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // when it was opened
  // Reads bytes [offset, offset + n) into `out`; tg::Error naming the file when it ends earlier
  // (it was truncated since it was opened) or the read fails.
  void read_at(uint64_t offset, void* out, size_t n) const;
  // Bytes [offset, offset + n) copied by the kernel into memory of this process's own (a memfd,
  // mapped shared, its pages present), unmapped with the last copy of the pointer: nothing done to
  // the file afterwards (rewritten in place, truncated) reaches them, as it reaches a mapping of
  // the file, and no zero-filled page is made first, the cost of reading into fresh memory
  // (dev/NOTES.md). nullptr where the system refuses (no memfd or sendfile into it): read_at then.
  // tg::Error naming the file when it ends early or memory runs out.
  std::shared_ptr<uint8_t> copy_to_memory(uint64_t offset, uint64_t n) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

class Folder {
 public:
  explicit Folder(const std::string& path);  // tg::Error naming `what` when not a folder
  ~Folder();
  Folder(const Folder&) = delete;
  Folder& operator=(const Folder&) = delete;

  const std::string& path() const { return path_; }
  std::string path_of(const std::string& name) const { return path_ + "/" + name; }  // for messages
  bool has_file(const std::string& name) const;
  bool exists(const std::string& name) const;
  std::vector<uint8_t> read(const std::string& name, size_t max_bytes = SIZE_MAX) const;  // as read_file
  File open(const std::string& name) const;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace tg::io
