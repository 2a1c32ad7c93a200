// Where a tensor's memory lives: the host, or one CUDA device.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace tg {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// True when tapegrad was built with its CUDA backend and a device is present.
bool cuda_is_available();
int cuda_device_count();
// "cuda" when available, else "cpu": what examples pick by default.
Device default_device();

}  // namespace tg
