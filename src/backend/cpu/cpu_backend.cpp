// cpu_backend.cpp — the oneDNN CPU backend: allocation, transfers, loss, SGD and the
// elementwise ops; the layer ops live in conv_linear.cpp and norm_pool.cpp.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../factories.hpp"
#include "../fusion_switch.hpp"
#include "../host_backend.hpp"
#include "channel_runs.hpp"
#include "ops.hpp"
#include "ringtrain/core/bf16.hpp"

namespace ringtrain::backend {
namespace cpu {
namespace {

// oneDNN's name of the instruction set its kernels dispatch to on this CPU.
const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "unknown";
  }
}

bool has_bf16_instructions(dnnl::cpu_isa isa) {
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// kWidestPack, or 8 under RINGTRAIN_CPU_PACK_LANES=8; any other value is refused by name.
int pack_lanes_from_environment() {
  const char* setting = std::getenv("RINGTRAIN_CPU_PACK_LANES");
  if (!setting) return kWidestPack;
  RT_REQUIRE_INPUT(std::string(setting) == "8", "RINGTRAIN_CPU_PACK_LANES=", setting,
                   ": only 8 (the AVX2 build's width, for tests) may be set");
  return 8;
}

class CpuBackend : public HostBackend {
 public:
  CpuBackend(int threads, Precision precision, ConvWeightGrad weight_grad,
             ConvAlgorithm conv_algorithm)
      : HostBackend(threads), precision_(precision), isa_(dnnl::get_effective_cpu_isa()) {
    ctx_.weight_grad = weight_grad;
    ctx_.conv_algorithm = conv_algorithm;
    // Without AVX512-BF16 or AMX oneDNN would emulate bf16 through fp32, slower than fp32
    // itself: stop instead of training slowly in silence (docs/GUIDE.md, "Mixed precision").
    RT_REQUIRE_INPUT(precision != Precision::kBF16 || has_bf16_instructions(isa_),
                     "train.precision = bf16 needs a CPU with AVX512-BF16 or AMX, but oneDNN "
                     "runs on ",
                     isa_name(isa_), " here; use train.precision = fp32 on this machine");
    ctx_.act = precision == Precision::kBF16 ? dt::bf16 : dt::f32;
    ctx_.pack_lanes = pack_lanes_from_environment();
  }

  std::string name() const override { return "cpu"; }
  Precision precision() const override { return precision_; }
  std::string instruction_set() const override { return isa_name(isa_); }
  std::string libraries() const override {
    const dnnl_version_t* v = dnnl_version();
    return str("oneDNN ", v->major, ".", v->minor, ".", v->patch);
  }

  // fp32, or bf16 activations (plain; ops take them in whatever layout they come).
  Tensor alloc(const Shape& shape, DType dtype) override {
    if (dtype == DType::kF32) return HostBackend::alloc(shape, dtype);
    size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
    return Tensor(shape, dtype, aligned_host_alloc(bytes), bytes);
  }

  // Into a plain tensor; a bf16 one takes the values rounded to nearest even.
  void upload(const float* host, Tensor& t) override {
    RT_CHECK(t.is_plain(), "upload into a tensor with a backend layout");
    if (t.dtype() == DType::kBF16) {
      auto* out = static_cast<uint16_t*>(t.raw());
      for (int64_t i = 0, n = t.numel(); i < n; ++i) out[i] = float_to_bf16(host[i]);
      return;
    }
    std::memcpy(t.raw(), host, size_t(t.numel()) * sizeof(float));
  }

  void download(const Tensor& t, float* host) override {
    if (t.is_plain() && t.dtype() == DType::kF32) {
      std::memcpy(host, t.raw(), size_t(t.numel()) * sizeof(float));
      return;
    }
    memory dst(plain_desc(t.shape()), ctx_.engine, host);
    download_reorder_.run(ctx_, mem_of(ctx_, t), dst);
  }

  void synchronize() override { ctx_.stream.wait(); }

  ReorderTime reorder_time() const override { return ctx_.reorders; }
  std::string op_choices() const override {
    // The convolutions' clause last: the trainer's line on them ends "as the deck gave them".
    std::string stems = norm_choices();
    const std::string algorithm = algorithm_choices(), convs = conv_choices();
    if (!algorithm.empty()) stems += (stems.empty() ? "" : "; ") + algorithm;
    return stems.empty() || convs.empty() ? stems + convs : stems + "; " + convs;
  }

  bool fuses_conv_residual() const override { return true; }
  std::unique_ptr<ConvOp> make_conv(const ConvSpec& s) override { return cpu::make_conv(ctx_, s); }
  std::unique_ptr<LinearOp> make_linear(const LinearSpec& s) override {
    return cpu::make_linear(ctx_, s);
  }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormSpec& s) override {
    return cpu::make_batch_norm(ctx_, s,
                                {!env_switch("RINGTRAIN_CPU_BATCH_NORM", "own", "onednn"),
                                 fusion_allowed("RINGTRAIN_CPU_NORM_ADD")});
  }
  std::unique_ptr<NormReluMaxPoolOp> make_norm_relu_max_pool(
      const NormReluMaxPoolSpec& s) override {
    return cpu::make_norm_relu_max_pool(ctx_, s, Backend::make_norm_relu_max_pool(s),
                                        fusion_allowed("RINGTRAIN_CPU_NORM_POOL"));
  }
  std::unique_ptr<ReluOp> make_relu() override { return cpu::make_relu(ctx_); }
  std::unique_ptr<PoolOp> make_pool(const PoolSpec& s) override { return cpu::make_pool(ctx_, s); }
  std::unique_ptr<PoolOp> make_max_pool_relu(int window) override {
    return cpu::make_max_pool_relu(ctx_, window, Backend::make_max_pool_relu(window),
                                   fusion_allowed("RINGTRAIN_CPU_POOL_RELU"));
  }
  std::unique_ptr<AddOp> make_add(bool fuse_relu) override {
    return cpu::make_add(ctx_, fuse_relu);
  }

 private:
  // With Winograd asked for or measured: how many convolutions have it (for every pass) and how
  // many not.
  std::string algorithm_choices() const {
    const ConvAlgorithmCount& n = ctx_.conv_algorithm_count;
    if (ctx_.conv_algorithm == ConvAlgorithm::kDirect || n.winograd + n.direct == 0) return "";
    return str("convolutions: Winograd ", n.winograd, ", direct ", n.direct, " (",
               conv_algorithm_name(ctx_.conv_algorithm), ")");
  }

  std::string conv_choices() const {
    const ConvPathCount& n = ctx_.conv_path_count;
    if (n.gemm + n.onednn + n.data_forward + n.data_onednn == 0) return "";
    const std::string weights = str("conv weight gradients: gemm ", n.gemm, ", oneDNN ", n.onednn,
                                    " (", conv_weight_grad_name(ctx_.weight_grad), ")");
    if (ctx_.weight_grad != ConvWeightGrad::kMeasure) return weights;
    return str(weights, "; input gradients: forward kernel ", n.data_forward, ", oneDNN ",
               n.data_onednn);
  }

  // The batch norms fused with what follows them, each kind counted where one ran.
  std::string norm_choices() const {
    std::string out;
    const auto add = [&](const char* what, const FusedCount& n) {
      if (n.fused + n.composed == 0) return;
      out += str(out.empty() ? "" : "; ", what, ": fused ", n.fused, ", oneDNN ", n.composed);
    };
    add("batch norm + ReLU + max pool", ctx_.norm_pool_count);
    add("max pool + ReLU", ctx_.pool_relu_count);
    add("batch norm + residual + ReLU", ctx_.norm_add_count);
    const FusedCount& n = ctx_.norm_count;
    if (n.fused + n.composed > 0)
      out +=
          str(out.empty() ? "" : "; ", "batch norm: own passes ", n.fused, ", oneDNN ", n.composed);
    return out;
  }

  Precision precision_;
  dnnl::cpu_isa isa_;
  Context ctx_;
  CachedReorder download_reorder_;
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(int threads, Precision precision,
                                          ConvWeightGrad weight_grad,
                                          ConvAlgorithm conv_algorithm) {
  return std::make_unique<cpu::CpuBackend>(threads, precision, weight_grad, conv_algorithm);
}

}  // namespace ringtrain::backend
