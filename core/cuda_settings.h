// Numerics switches of the CUDA backend. They work (and are remembered) in builds without CUDA
// too, so a training script can set them unconditionally.
#pragma once

namespace tg {

// TF32 tensor-core math for float32 GEMMs: about 8x faster on Hopper, with a 10-bit mantissa
// for the products (accumulation stays float32). Off by default, as PyTorch's "highest"
// float32 matmul precision. bfloat16 GEMMs are unaffected.
void set_allow_tf32(bool allow);
bool allow_tf32();

// scaled_dot_product_attention through cuDNN's fused flash-attention kernels where the build has
// cuDNN, its runtime takes the call and they beat tapegrad's own (ops/attention.h says where). On
// by default, as torch.backends.cuda.enable_cudnn_sdp; off, tapegrad's kernels serve every call.
void enable_cudnn_sdp(bool enabled);
bool cudnn_sdp_enabled();
// cuDNN's attention backward: deterministic (the default: the same bits at every run, as
// tapegrad's own kernels), or its faster kernel that adds dq up with float atomics, whose last
// bits vary between runs (bench/RESULTS.md times both).
void set_cudnn_sdp_deterministic(bool deterministic);
bool cudnn_sdp_deterministic();

// A mixture of experts' per-expert GEMMs (grouped_mm) as one grouped cuBLAS launch a projection
// where they are small (cublasGemmGroupedBatchedEx; the default), or always one GEMM an expert
// (bench/moe_bench times both).
void enable_grouped_gemm(bool enabled);
bool grouped_gemm_enabled();

}  // namespace tg
