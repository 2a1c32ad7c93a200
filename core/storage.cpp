#include "core/storage.h"

#include "core/memory.h"

namespace tg {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocate(device, nbytes);
}

Storage::~Storage() { deallocate(device_, data_, nbytes_); }

}  // namespace tg
