// A file of the fuzzer's own (in memory where the machine has /dev/shm) that each input is
// written to, for loaders that take a path.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

inline std::string fuzz_scratch_dir(const std::string& name) {
  static const std::string root = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
  const std::string dir = root + "/tg_fuzz_" + name + "_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

inline void fuzz_write(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}
