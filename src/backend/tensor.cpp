// tensor.cpp — Tensor, shape helpers, host allocation and the backend factory.
#include "ringtrain/backend/tensor.hpp"

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <utility>

#include "factories.hpp"
#include "fusion_switch.hpp"
#include "ringtrain/backend/backend.hpp"
#include "ringtrain/backend/devices.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::backend {

size_t dtype_size(DType dtype) {
  return dtype == DType::kF32 ? 4 : 2;
}
const char* dtype_name(DType dtype) {
  return dtype == DType::kF32 ? "fp32" : dtype == DType::kBF16 ? "bf16" : "fp16";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? "," : "") << shape[i];
  out << ']';
  return out.str();
}

Tensor::Tensor(Shape shape, DType dtype, std::shared_ptr<void> storage, size_t bytes,
               std::shared_ptr<const Layout> layout)
    : shape_(std::move(shape)),
      dtype_(dtype),
      storage_(std::move(storage)),
      data_(storage_.get()),
      bytes_(bytes),
      layout_(std::move(layout)) {}

Tensor Tensor::view(float* data, Shape shape) {
  Tensor t;
  t.bytes_ = size_t(shape_numel(shape)) * sizeof(float);
  t.shape_ = std::move(shape);
  t.data_ = data;
  return t;
}

namespace {
// Host tensors of the whole process. A mutex, not atomics: the tag split at the peak must be
// taken with the peak itself, and host tensors are made a few times a step at most.
std::mutex host_mutex;
MemoryLedger host_ledger;
std::atomic<uint64_t> offers{0};
}  // namespace

uint64_t huge_page_offers() {
  return offers.load();
}

std::shared_ptr<void> aligned_host_alloc(size_t bytes) {
  const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  // A block of a huge page or more starts on a huge-page boundary and is offered to the kernel
  // for transparent huge pages (the machine's setting decides, madvise or always): the
  // activations the cpu backend streams through then take a TLB entry per 2 MiB, not per
  // 4 KiB (docs/TUNING.md, "Huge pages for host tensors"). RINGTRAIN_HUGE_PAGES=off keeps
  // every block on 4 KiB pages.
  const bool huge = rounded >= kHugePageBytes && !env_switch("RINGTRAIN_HUGE_PAGES", "on", "off");
  void* p = nullptr;
  if (posix_memalign(&p, huge ? kHugePageBytes : 64, rounded) != 0) p = nullptr;
  RT_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
  if (huge) {
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: refused, the pages stay 4 KiB
    offers += 1;
  }
  const int tag = current_memory_tag();
  {
    std::lock_guard<std::mutex> lock(host_mutex);
    host_ledger.take(tag, rounded);
  }
  return std::shared_ptr<void>(p, [rounded, tag](void* block) {
    {
      std::lock_guard<std::mutex> lock(host_mutex);
      host_ledger.give(tag, rounded);
    }
    std::free(block);
  });
}

MemoryUse host_tensor_memory() {
  std::lock_guard<std::mutex> lock(host_mutex);
  MemoryUse use;
  use.in_use = host_ledger.in_use();
  use.peak = host_ledger.peak();
  use.at_peak = host_ledger.at_peak();
  return use;
}

void reset_host_tensor_peak() {
  std::lock_guard<std::mutex> lock(host_mutex);
  host_ledger.reset_peak();
}

namespace {

// An enum's values and their names, in the order an error lists them (constant: no
// initialization order to mind).
template <typename Enum, size_t N>
using Names = std::array<std::pair<Enum, const char*>, N>;

constexpr Names<Precision, 4> kPrecisions{{{Precision::kF32, "fp32"},
                                           {Precision::kBF16, "bf16"},
                                           {Precision::kF16, "fp16"},
                                           {Precision::kTF32, "tf32"}}};
constexpr Names<ConvWeightGrad, 3> kWeightGrads{{{ConvWeightGrad::kOnednn, "onednn"},
                                                 {ConvWeightGrad::kGemm, "gemm"},
                                                 {ConvWeightGrad::kMeasure, "measure"}}};
constexpr Names<ConvAlgorithm, 4> kAlgorithms{{{ConvAlgorithm::kDirect, "direct"},
                                               {ConvAlgorithm::kWinograd, "winograd"},
                                               {ConvAlgorithm::kMeasure, "measure"},
                                               {ConvAlgorithm::kAuto, "auto"}}};

// The value named `text`; else an InputError "unknown <what> '<text>': choose a, b or c".
template <typename Enum, size_t N>
Enum parse_name(const Names<Enum, N>& names, const std::string& text, const char* what) {
  std::string choices;
  for (size_t i = 0; i < names.size(); ++i) {
    if (text == names[i].second) return names[i].first;
    choices += std::string(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i].second;
  }
  throw InputError(str("unknown ", what, " '", text, "': choose ", choices));
}

template <typename Enum, size_t N>
const char* name_of(const Names<Enum, N>& names, Enum value) {
  for (const auto& [v, name] : names)
    if (v == value) return name;
  return "?";
}

}  // namespace

Precision parse_precision(const std::string& text) {
  return parse_name(kPrecisions, text, "precision");
}

ConvWeightGrad parse_conv_weight_grad(const std::string& text) {
  return parse_name(kWeightGrads, text, "convolution weight-gradient path");
}

const char* conv_weight_grad_name(ConvWeightGrad path) {
  return name_of(kWeightGrads, path);
}

ConvAlgorithm parse_conv_algorithm(const std::string& text) {
  return parse_name(kAlgorithms, text, "convolution algorithm");
}

const char* conv_algorithm_name(ConvAlgorithm algorithm) {
  return name_of(kAlgorithms, algorithm);
}

const char* precision_name(Precision precision) {
  return name_of(kPrecisions, precision);
}

namespace {

// cpu and ref run fp32 and bf16; fp16 and tf32 exist for tensor cores.
void require_host_precision(const std::string& backend, Precision precision) {
  RT_REQUIRE_INPUT(precision == Precision::kF32 || precision == Precision::kBF16,
                   "train.precision = ", precision_name(precision), ": the ", backend,
                   " backend runs fp32 or bf16; ", precision_name(precision),
                   " runs on train.backend = cuda");
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& name, int threads, Precision precision,
                                      ConvWeightGrad weight_grad, ConvAlgorithm conv_algorithm) {
  RT_REQUIRE_INPUT(threads >= 1, "backend ", name, ": threads must be >= 1, got ", threads);
  if (name != "cpu" && name != "ref" && name != "cuda")
    throw InputError(str("unknown backend '", name, "': known backends are cpu, ref, cuda"));
  if (name == "cuda") {
    CudaOptions options;
    options.precision = precision;
    return make_cuda_backend(options);
  }
  require_host_precision(name, precision);
  if (name == "cpu") return make_cpu_backend(threads, precision, weight_grad, conv_algorithm);
  if (precision == Precision::kBF16) return make_bf16_reference(make_ref_backend(threads));
  return make_ref_backend(threads);
}

}  // namespace ringtrain::backend
