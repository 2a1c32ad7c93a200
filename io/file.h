// Whole-file reads and crash-safe writes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tg::io {

// The file's bytes; tg::Error naming the path when it cannot be read.
std::vector<uint8_t> read_file(const std::string& path);

// Receives consecutive chunks of a file being written.
using ChunkWriter = std::function<void(const void* data, size_t size)>;

// Writes `path` atomically: the content goes to "<path>.tmp", is fsync'ed, then renamed over
// `path` (and the directory fsync'ed). An error at any point (or a crash) leaves an existing
// `path` untouched; the temporary file is removed on error. `produce` calls the writer it is
// given once per chunk, so large files are never held in memory twice.
void write_file_atomic(const std::string& path, const std::function<void(const ChunkWriter&)>& produce);
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace tg::io
