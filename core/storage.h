// Storage: one reference-counted block of memory that tensors view. The version counter lives
// here so every view of the block sees in-place writes (autograd checks it on saved tensors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace tg {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Host memory another object owns (from_pretrained's file mappings): `owner` is held until the
  // storage goes, nothing is allocated or freed here.
  Storage(void* data, size_t nbytes, std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::shared_ptr<const void> owner_;
  uint64_t version_ = 0;
};

}  // namespace tg
