// Numerics switches of the CUDA backend. They work (and are remembered) in builds without CUDA
// too, so a training script can set them unconditionally.
#pragma once

namespace tg {

// TF32 tensor-core math for float32 GEMMs: about 8x faster on Hopper, with a 10-bit mantissa
// for the products (accumulation stays float32). Off by default, as PyTorch's "highest"
// float32 matmul precision. bfloat16 GEMMs are unaffected.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace tg
