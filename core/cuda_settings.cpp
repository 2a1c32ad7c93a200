#include "core/cuda_settings.h"

#include <atomic>

namespace tg {
namespace {
std::atomic<bool> tf32_allowed{false};
std::atomic<bool> cudnn_sdp{true};
std::atomic<bool> cudnn_sdp_det{true};
std::atomic<bool> grouped_gemm{true};
}

void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

void enable_cudnn_sdp(bool enabled) { cudnn_sdp.store(enabled, std::memory_order_relaxed); }
bool cudnn_sdp_enabled() { return cudnn_sdp.load(std::memory_order_relaxed); }

void set_cudnn_sdp_deterministic(bool deterministic) { cudnn_sdp_det.store(deterministic, std::memory_order_relaxed); }
bool cudnn_sdp_deterministic() { return cudnn_sdp_det.load(std::memory_order_relaxed); }

void enable_grouped_gemm(bool enabled) { grouped_gemm.store(enabled, std::memory_order_relaxed); }
bool grouped_gemm_enabled() { return grouped_gemm.load(std::memory_order_relaxed); }

}  // namespace tg
