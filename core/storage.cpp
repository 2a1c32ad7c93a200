#include "core/storage.h"

#include "core/memory.h"

#include <utility>

namespace tg {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocate(device, nbytes);
}

Storage::Storage(void* data, size_t nbytes, std::shared_ptr<const void> owner)
    : data_(data), nbytes_(nbytes), device_(Device::cpu()), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (!owner_) deallocate(device_, data_, nbytes_);
}

}  // namespace tg
