// cuDNN's fused flash attention through its backend (graph) API, without cudnn-frontend (which no
// system package ships): the operation graphs cudnn-frontend's CompositeSDPANode and
// CompositeSDPABackwardNode expand to on cuDNN 9 (matmul, pointwise, reduction, reshape and
// gen_index nodes that cuDNN fuses into one flash-attention kernel each way), an execution plan
// for each from heuristics mode A, and their execution. Host code only and no tapegrad tensors:
// the library (ops/cuda/attention_cudnn.cu) and dev/cuda/05_attention_cudnn.cu share it.
//
// Versions: 9.0 is the first whose engines take these graphs at any sequence length without a
// padding mask (8.9 wants multiples of 64); 9.10.0 and 9.10.1 give wrong results (cudnn-frontend
// refuses them); up to 9.15 the backward wants a padding mask unless the key count is a multiple
// of 128, which this graph does not add (such calls are refused here). The unified SDPA_FWD /
// SDPA_BWD operations (9.13+) cannot express a causal mask before 9.21, so this form serves all 9.x.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cudnn_utils.cuh"

namespace tg::cuda::cudnn_sdpa {

using Dims = std::array<int64_t, 4>;

// One attention call as cuDNN sees it: q [b, hq, sq, d_qk], k [b, hkv, skv, d_qk], v [b, hkv,
// skv, d_v], o and dout [b, hq, sq, d_v], each with any element strides (a unit last one); dq,
// dk, dv as q, k, v. The per-row logsumexp (cuDNN's "stats", natural log of the scaled scores) is float32
// [b, hq, sq], contiguous. With `causal`, query i sees keys j <= i (top-left aligned).
struct Problem {
  bool backward = false, causal = false, deterministic = false;
  cudnnDataType_t dtype = CUDNN_DATA_BFLOAT16;
  int64_t b = 0, hq = 0, hkv = 0, sq = 0, skv = 0, d_qk = 0, d_v = 0;
  Dims q{}, k{}, v{}, o{};        // strides
  Dims dout{}, dq{}, dk{}, dv{};  // strides, backward only

  // Everything a plan depends on (the scale is a runtime value, not part of it).
  std::vector<int64_t> key() const {
    std::vector<int64_t> key = {backward, causal, deterministic, dtype, b, hq, hkv, sq, skv, d_qk, d_v};
    for (const Dims* s : {&q, &k, &v, &o, &dout, &dq, &dk, &dv}) key.insert(key.end(), s->begin(), s->end());
    return key;
  }
};

// Why cuDNN cannot take `p` at runtime `version` on a GPU of compute capability `sm_major`
// (empty: it may; the plan build has the last word).
inline std::string unsupported_reason(const Problem& p, size_t version, int sm_major) {
  if (version < 90000) return "cuDNN " + std::to_string(version) + " is older than 9.0";
  if (version == 91000 || version == 91001) return "cuDNN 9.10.0 and 9.10.1 have known attention bugs";
  if (p.dtype != CUDNN_DATA_BFLOAT16 && p.dtype != CUDNN_DATA_HALF) return "not bfloat16 or float16";
  const int64_t max_d = sm_major == 9 ? 256 : 128;
  if (p.d_qk % 8 || p.d_v % 8 || p.d_qk > max_d || p.d_v > max_d)
    return "head dims " + std::to_string(p.d_qk) + " / " + std::to_string(p.d_v) + " (multiples of 8 up to " +
           std::to_string(max_d) + " on this GPU)";
  if (p.hkv <= 0 || p.hq % p.hkv) return "query heads not a multiple of kv heads";
  if (p.backward && p.sq == 1 && p.skv == 1) return "backward of one query and one key";
  if (p.backward && version <= 91500 && p.skv % 128)
    return "backward with a key count not a multiple of 128 before cuDNN 9.16";
  return {};
}

// Owns one backend descriptor.
class Descriptor {
 public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) { TG_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Descriptor() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Variant-pack ids of the tensors a caller passes (the graph's own start at kFirstVirtual).
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv,
  kScale, kNegInf, kOne,   // host scalars, by value
  kSoftmaxSum, kDqAccum,   // backward scratch in the workspace (sum(dout * o) a row; float32 dq)
  kFirstVirtual = 100
};

// A finalized execution plan and what executing it needs.
struct Plan {
  std::vector<std::unique_ptr<Descriptor>> keep;  // the graph it was built from
  cudnnBackendDescriptor_t plan = nullptr;
  std::vector<int64_t> uids;                      // the variant pack's tensors
  int64_t cudnn_workspace = 0;                    // cuDNN's own, first in the workspace
  int64_t softmax_sum_offset = -1, dq_accum_offset = -1, dq_accum_bytes = 0;
  int64_t workspace_bytes = 0;                    // all of it
  int64_t engine = -1;                            // cuDNN's global engine index
  bool nondeterministic = false;                  // the engine's numerical note
};

namespace detail {

inline void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                int64_t count, const void* value) {
  TG_CUDNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, value));
}

// Thrown while building when cuDNN says NOT_SUPPORTED (any of its sub-codes): the caller falls back.
struct NotSupported {
  std::string what;
};

inline void finalize(cudnnBackendDescriptor_t d, const char* what) {
  const cudnnStatus_t st = cudnnBackendFinalize(d);
  if (st == CUDNN_STATUS_SUCCESS) return;
  if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED) {
    char last[512] = "";
    cudnnGetLastErrorString(last, sizeof(last));
    throw NotSupported{std::string(what) + ": " + cudnnGetErrorString(st) + (last[0] ? std::string(": ") + last : "")};
  }
  throw_cudnn_error(st, what, __FILE__, __LINE__);
}

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;

// The operation graph under construction: tensors and operations in topological order.
class Graph {
 public:
  explicit Graph(Plan& plan) : plan_(plan) {}

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t dt, const Dims& dims, const Dims& strides,
                                  bool is_virtual = false, bool by_value = false) {
    cudnnBackendDescriptor_t t = own(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(t, "tensor descriptor");
    if (!is_virtual) plan_.uids.push_back(uid);
    return t;
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t dt, const Dims& dims, const Dims& strides) {
    return tensor(next_uid_++, dt, dims, strides, true);
  }
  // A float32 host scalar broadcast over 4 dims.
  cudnnBackendDescriptor_t scalar(int64_t uid) { return tensor(uid, kF32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

  // y = mode(x [, b [, t]]) in float32 math (BOOLEAN for comparisons); axis for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 cudnnBackendDescriptor_t b = nullptr, cudnnBackendDescriptor_t t = nullptr,
                 cudnnDataType_t prec = kF32, int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = own(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw, "pointwise descriptor");
    cudnnBackendDescriptor_t op = linked(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
                                         {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw},
                                          {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
                                          {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b},
                                          {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t},
                                          {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y}});
    const float one = 1.f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    add_op(op, "pointwise operation");
  }
  // c = a b (batched over the leading dims, which broadcast: grouped kv heads).
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = own(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32);
    finalize(mm, "matmul descriptor");
    add_op(linked(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
                  {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a}, {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b},
                   {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c}, {CUDNN_ATTR_OPERATION_MATMUL_DESC, mm}}),
           "matmul operation");
  }
  // y = x reduced (ADD or MAX) over the dims where y has size 1 and x does not.
  void reduction(cudnnReduceTensorOp_t red, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd = own(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32);
    set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red);
    finalize(rd, "reduction descriptor");
    add_op(linked(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
                  {{CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd}, {CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
                   {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y}}),
           "reduction operation");
  }
  // y: the same elements as x under other dims / strides (a transposed view).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    add_op(linked(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
                  {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y}}),
           "reshape operation");
  }

  // x with -inf where key j > query i (cudnn-frontend's diagonal band mask, right bound 0).
  cudnnBackendDescriptor_t causal_mask(cudnnBackendDescriptor_t x, const Dims& dims, const Dims& strides,
                                       cudnnBackendDescriptor_t neg_inf) {
    cudnnBackendDescriptor_t row = virt(CUDNN_DATA_INT32, dims, strides), col = virt(CUDNN_DATA_INT32, dims, strides);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, row, nullptr, nullptr, kF32, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, x, col, nullptr, nullptr, kF32, 3);
    cudnnBackendDescriptor_t keep = virt(CUDNN_DATA_BOOLEAN, dims, strides);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, CUDNN_DATA_BOOLEAN);
    cudnnBackendDescriptor_t y = virt(kF32, dims, strides);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, y, neg_inf, keep);
    return y;
  }

  const std::vector<cudnnBackendDescriptor_t>& ops() const { return ops_; }
  cudnnBackendDescriptor_t own(cudnnBackendDescriptorType_t type) {
    plan_.keep.push_back(std::make_unique<Descriptor>(type));
    return plan_.keep.back()->get();
  }

 private:
  // A new descriptor of `type` whose attributes name these descriptors (null ones left unset).
  cudnnBackendDescriptor_t linked(
      cudnnBackendDescriptorType_t type,
      std::initializer_list<std::pair<cudnnBackendAttributeName_t, cudnnBackendDescriptor_t>> links) {
    cudnnBackendDescriptor_t d = own(type);
    for (const auto& [name, target] : links)
      if (target) set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &target);
    return d;
  }
  void add_op(cudnnBackendDescriptor_t op, const char* what) {
    finalize(op, what);
    ops_.push_back(op);
  }
  Plan& plan_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_uid_ = kFirstVirtual;
};

inline Dims swap_last(Dims d) {
  std::swap(d[2], d[3]);
  return d;
}

// softmax(q k^T * scale [masked]) v and the stats, as cudnn-frontend's CompositeSDPANode.
inline void forward_graph(Graph& g, const Problem& p) {
  const Dims s_dims{p.b, p.hq, p.sq, p.skv}, s_strides{p.hq * p.sq * p.skv, p.sq * p.skv, p.skv, 1};
  const Dims r_dims{p.b, p.hq, p.sq, 1}, r_strides{p.hq * p.sq, p.sq, 1, 1};
  auto q = g.tensor(kQ, p.dtype, {p.b, p.hq, p.sq, p.d_qk}, p.q);
  auto kt = g.tensor(kK, p.dtype, {p.b, p.hkv, p.d_qk, p.skv}, swap_last(p.k));
  auto v = g.tensor(kV, p.dtype, {p.b, p.hkv, p.skv, p.d_v}, p.v);
  auto o = g.tensor(kO, p.dtype, {p.b, p.hq, p.sq, p.d_v}, p.o);
  auto stats = g.tensor(kStats, kF32, r_dims, r_strides);
  auto scale = g.scalar(kScale);
  auto s = g.virt(kF32, s_dims, s_strides);
  g.matmul(q, kt, s);
  auto scaled = g.virt(kF32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, s, scaled, scale);
  if (p.causal) scaled = g.causal_mask(scaled, s_dims, s_strides, g.scalar(kNegInf));
  auto max = g.virt(kF32, r_dims, r_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, scaled, max);
  auto centred = g.virt(kF32, s_dims, s_strides), e = g.virt(kF32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, centred, max);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, e);
  auto sum = g.virt(kF32, r_dims, r_strides), log_sum = g.virt(kF32, r_dims, r_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, stats, log_sum);
  auto probs = g.virt(p.dtype, s_dims, s_strides);  // in the io type, as the second matmul's A
  g.pointwise(CUDNN_POINTWISE_DIV, e, probs, sum);
  g.matmul(probs, v, o);
}

// dq, dk, dv from dout, as cudnn-frontend's CompositeSDPABackwardNode (no dropout, bias or
// padding): P recomputed from the stats, dS = P (dP - rowsum(dout o)) scale; grouped kv heads
// summed by reductions over each group; dq through a float32 accumulator in the workspace unless
// `deterministic` (then cuDNN's dP-workspace kernel writes dq itself).
inline void backward_graph(Graph& g, Plan& plan, const Problem& p) {
  const Dims s_dims{p.b, p.hq, p.sq, p.skv}, s_strides{p.hq * p.sq * p.skv, p.sq * p.skv, p.skv, 1};
  const Dims t_dims{p.b, p.hq, p.skv, p.sq}, t_strides{p.hq * p.sq * p.skv, p.sq * p.skv, 1, p.skv};
  const Dims r_dims{p.b, p.hq, p.sq, 1}, r_strides{p.hq * p.sq, p.sq, 1, 1};
  auto q = g.tensor(kQ, p.dtype, {p.b, p.hq, p.sq, p.d_qk}, p.q);
  auto kt = g.tensor(kK, p.dtype, {p.b, p.hkv, p.d_qk, p.skv}, swap_last(p.k));
  auto vt = g.tensor(kV, p.dtype, {p.b, p.hkv, p.d_v, p.skv}, swap_last(p.v));
  auto o = g.tensor(kO, p.dtype, {p.b, p.hq, p.sq, p.d_v}, p.o);
  auto dout = g.tensor(kDout, p.dtype, {p.b, p.hq, p.sq, p.d_v}, p.dout);
  auto stats = g.tensor(kStats, kF32, r_dims, r_strides);
  auto dq = g.tensor(kDq, p.dtype, {p.b, p.hq, p.sq, p.d_qk}, p.dq);
  auto dk = g.tensor(kDk, p.dtype, {p.b, p.hkv, p.skv, p.d_qk}, p.dk);
  auto dv = g.tensor(kDv, p.dtype, {p.b, p.hkv, p.skv, p.d_v}, p.dv);
  auto scale = g.scalar(kScale);

  // softmax_sum = rowsum(dout * o)
  auto prod = g.virt(kF32, {p.b, p.hq, p.sq, p.d_v}, {p.hq * p.sq * p.d_v, p.sq * p.d_v, p.hq * p.d_v, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dout, prod, o);
  auto rowsum = g.virt(kF32, r_dims, r_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, rowsum);
  auto softmax_sum = g.tensor(kSoftmaxSum, kF32, r_dims, r_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, rowsum, softmax_sum, g.scalar(kOne));

  // P = exp(q k^T * scale - stats [masked]); dv = P^T dout
  auto s = g.virt(kF32, s_dims, s_strides), scaled = g.virt(kF32, s_dims, s_strides);
  g.matmul(q, kt, s);
  g.pointwise(CUDNN_POINTWISE_MUL, s, scaled, scale);
  auto centred = g.virt(kF32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, centred, stats);
  if (p.causal) centred = g.causal_mask(centred, s_dims, s_strides, g.scalar(kNegInf));
  auto probs = g.virt(kF32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, probs);
  auto probs_t = g.virt(p.dtype, t_dims, t_strides);
  g.reshape(probs, probs_t);
  const bool grouped = p.hq != p.hkv;
  const Dims kv_full_strides{p.hq * p.skv * p.d_v, p.skv * p.d_v, p.d_v, 1};
  if (!grouped) {
    g.matmul(probs_t, dout, dv);
  } else {
    auto dv_full = g.virt(p.dtype, {p.b, p.hq, p.skv, p.d_v}, kv_full_strides);
    g.matmul(probs_t, dout, dv_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
  }

  // dS = P (dout v^T - softmax_sum) scale; dk = dS^T q
  auto dp = g.virt(kF32, s_dims, s_strides), dp_centred = g.virt(kF32, s_dims, s_strides);
  g.matmul(dout, vt, dp);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, dp_centred, softmax_sum);
  auto ds_unscaled = g.virt(kF32, s_dims, s_strides), ds = g.virt(kF32, s_dims, s_strides);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_centred, ds_unscaled, probs);
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, ds, scale);
  auto ds_t = g.virt(p.dtype, t_dims, t_strides);
  g.reshape(ds, ds_t);
  if (!grouped) {
    g.matmul(ds_t, q, dk);
  } else {
    const Dims dk_full_strides{p.hq * p.skv * p.d_qk, p.skv * p.d_qk, p.d_qk, 1};
    auto dk_full = g.virt(p.dtype, {p.b, p.hq, p.skv, p.d_qk}, dk_full_strides);
    g.matmul(ds_t, q, dk_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
  }

  // dq = dS k
  auto k_rows = g.virt(kF32, {p.b, p.hkv, p.skv, p.d_qk}, p.k);
  g.reshape(kt, k_rows);
  if (p.deterministic) {
    g.matmul(ds, k_rows, dq);
  } else {
    auto dq_accum = g.tensor(kDqAccum, kF32, {p.b, p.hq, p.sq, p.d_qk}, {p.hq * p.sq * p.d_qk, p.sq * p.d_qk, p.d_qk, 1});
    g.matmul(ds, k_rows, dq_accum);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, dq);
    plan.dq_accum_bytes = p.b * p.hq * p.sq * p.d_qk * int64_t(sizeof(float));
  }
}

inline int64_t align_up(int64_t n) { return (n + 255) / 256 * 256; }

// The engine behind a finalized config: its global index and whether it is nondeterministic.
inline void describe_engine(Plan& plan, Graph& g, cudnnBackendDescriptor_t cfg) {
  cudnnBackendDescriptor_t engine = g.own(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  TG_CUDNN_CHECK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
  TG_CUDNN_CHECK(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &plan.engine));
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  TG_CUDNN_CHECK(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                          CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
  for (int64_t i = 0; i < n; ++i) plan.nondeterministic |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
}

}  // namespace detail

// The plan for `p`, or nullptr when cuDNN supports none (`why` then says what cuDNN said);
// tg::Error for any other failure. Builds kernels (seconds at worst): call outside CUDA graph
// captures, once per Problem::key().
inline std::unique_ptr<Plan> build_plan(cudnnHandle_t handle, const Problem& p, std::string* why = nullptr) {
  auto plan = std::make_unique<Plan>();
  try {
    detail::Graph g(*plan);
    if (p.backward) detail::backward_graph(g, *plan, p);
    else detail::forward_graph(g, p);
    cudnnBackendDescriptor_t graph = g.own(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    detail::set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                static_cast<int64_t>(g.ops().size()), g.ops().data());
    detail::set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    detail::finalize(graph, "operation graph");

    cudnnBackendDescriptor_t heur = g.own(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    detail::set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    detail::set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    detail::finalize(heur, "engine heuristics");
    int64_t count = 0;
    TG_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                            &count, nullptr));
    std::vector<cudnnBackendDescriptor_t> configs;
    for (int64_t i = 0; i < count; ++i) configs.push_back(g.own(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    TG_CUDNN_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                            &count, configs.data()));
    std::string last = "heuristics mode A offered no engine";
    for (int64_t i = 0; i < count && !plan->plan; ++i) {
      cudnnBackendDescriptor_t exec = g.own(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      detail::set(exec, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      detail::set(exec, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[i]);
      try {
        detail::finalize(exec, "execution plan");
      } catch (const detail::NotSupported& e) {
        last = e.what;
        continue;
      }
      plan->plan = exec;
      int64_t n = 0;
      TG_CUDNN_CHECK(cudnnBackendGetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                              &plan->cudnn_workspace));
      detail::describe_engine(*plan, g, configs[i]);
    }
    if (!plan->plan) throw detail::NotSupported{last};
  } catch (const detail::NotSupported& e) {
    if (why) *why = e.what;
    return nullptr;
  }
  int64_t end = detail::align_up(plan->cudnn_workspace);
  if (p.backward) {
    plan->softmax_sum_offset = end;
    end += detail::align_up(p.b * p.hq * p.sq * int64_t(sizeof(float)));
    if (plan->dq_accum_bytes) {
      plan->dq_accum_offset = end;
      end += detail::align_up(plan->dq_accum_bytes);
    }
  }
  plan->workspace_bytes = end;
  return plan;
}

// The tensors of one call (those of the other direction are ignored).
struct Pointers {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void *o = nullptr, *stats = nullptr;  // forward outputs, backward inputs
  const void* dout = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

// Queues the plan on the handle's stream; `workspace`: plan.workspace_bytes bytes of device
// memory (256-byte aligned). No host synchronisation: a CUDA graph may capture it.
inline void execute(cudnnHandle_t handle, const Plan& plan, const Pointers& t, float scale, void* workspace) {
  const float neg_inf = -std::numeric_limits<float>::infinity(), one = 1.f;
  char* ws = static_cast<char*>(workspace);
  if (plan.dq_accum_offset >= 0 && cudnnGetVersion() < 90600) {  // later versions zero it themselves
    cudaStream_t s = nullptr;
    TG_CUDNN_CHECK(cudnnGetStream(handle, &s));
    if (cudaMemsetAsync(ws + plan.dq_accum_offset, 0, plan.dq_accum_bytes, s) != cudaSuccess)
      throw Error("cudnn sdpa: cudaMemsetAsync of the dq accumulator failed");
  }
  std::vector<void*> ptrs;
  for (int64_t uid : plan.uids) {
    switch (uid) {
      case kQ: ptrs.push_back(const_cast<void*>(t.q)); break;
      case kK: ptrs.push_back(const_cast<void*>(t.k)); break;
      case kV: ptrs.push_back(const_cast<void*>(t.v)); break;
      case kO: ptrs.push_back(t.o); break;
      case kStats: ptrs.push_back(t.stats); break;
      case kDout: ptrs.push_back(const_cast<void*>(t.dout)); break;
      case kDq: ptrs.push_back(t.dq); break;
      case kDk: ptrs.push_back(t.dk); break;
      case kDv: ptrs.push_back(t.dv); break;
      case kScale: ptrs.push_back(&scale); break;
      case kNegInf: ptrs.push_back(const_cast<float*>(&neg_inf)); break;
      case kOne: ptrs.push_back(const_cast<float*>(&one)); break;
      case kSoftmaxSum: ptrs.push_back(ws + plan.softmax_sum_offset); break;
      case kDqAccum: ptrs.push_back(ws + plan.dq_accum_offset); break;
      default: throw Error("cudnn sdpa: a plan names tensor " + std::to_string(uid) + " that no caller passes");
    }
  }
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  detail::set(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(plan.uids.size()),
              plan.uids.data());
  detail::set(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
              ptrs.data());
  detail::set(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  TG_CUDNN_CHECK(cudnnBackendFinalize(pack.get()));
  TG_CUDNN_CHECK(cudnnBackendExecute(handle, plan.plan, pack.get()));
}

}  // namespace tg::cuda::cudnn_sdpa
