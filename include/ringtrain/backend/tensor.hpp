// tensor.hpp — Tensor: a shape, an element type and device memory, owned or a view.
//
// The logical shape is NCHW (4-D) or [N, F] (2-D). The physical layout of the memory is
// the backend's business: plain row-major unless the backend attached a Layout (oneDNN's
// blocked formats on the CPU). Parameters and gradients are always plain, so the
// optimizer and the fusion engine can treat them as flat float arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ringtrain::backend {

using Shape = std::vector<int64_t>;

enum class DType { kF32, kBF16, kF16 };
size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

int64_t shape_numel(const Shape& shape);
// "[64,3,3,3]" for messages.
std::string shape_str(const Shape& shape);

// A backend-specific description of how a tensor's elements lie in memory.
class Layout {
 public:
  virtual ~Layout() = default;
};

class Tensor {
 public:
  Tensor() = default;

  // A tensor that owns `bytes` of memory released by `storage`'s deleter.
  Tensor(Shape shape, DType dtype, std::shared_ptr<void> storage, size_t bytes,
         std::shared_ptr<const Layout> layout = nullptr);
  // A plain fp32 view of memory someone else owns (a fusion buffer, a host batch).
  static Tensor view(float* data, Shape shape);

  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  // Bytes of storage (blocked layouts may pad, so this can exceed numel * dtype size).
  size_t bytes() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }
  bool is_view() const { return storage_ == nullptr && data_ != nullptr; }
  bool is_plain() const { return layout_ == nullptr; }

  void* raw() const { return data_; }
  // Device memory as fp32; plain tensors only have one element per logical index.
  float* f32() const { return static_cast<float*>(data_); }

  const std::shared_ptr<const Layout>& layout() const { return layout_; }

 private:
  Shape shape_;
  DType dtype_ = DType::kF32;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  std::shared_ptr<const Layout> layout_;
};

}  // namespace ringtrain::backend
