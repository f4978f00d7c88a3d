// dnnl_util.cpp — layouts on Tensors, allocation and cached reorders for the oneDNN ops.
#include "dnnl_util.hpp"

#include <algorithm>
#include <chrono>

#include "../factories.hpp"

namespace ringtrain::backend::cpu {

memory::dims to_dims(const Shape& shape) {
  return memory::dims(shape.begin(), shape.end());
}

dt to_dnnl(DType dtype) {
  return dtype == DType::kBF16 ? dt::bf16 : dt::f32;
}

memory::desc plain_desc(const Shape& shape, dt type) {
  switch (shape.size()) {
    case 1:
      return {to_dims(shape), type, tag::a};
    case 2:
      return {to_dims(shape), type, tag::ab};
    case 4:
      return {to_dims(shape), type, tag::abcd};
    default:
      RT_CHECK(false, "tensor of rank ", shape.size(), " ", shape_str(shape), " unsupported");
  }
}

memory::desc desc_of(const Tensor& t) {
  if (t.layout()) return static_cast<const DnnlLayout&>(*t.layout()).md;
  return plain_desc(t.shape(), to_dnnl(t.dtype()));
}

memory mem_of(const Context& ctx, const Tensor& t) {
  RT_CHECK(!t.empty(), "cpu backend: tensor used before it was computed");
  return memory(desc_of(t), ctx.engine, t.raw());
}

void ensure(Tensor& t, const Shape& shape, const memory::desc& md) {
  if (!t.empty() && t.shape() == shape && desc_of(t) == md) return;
  RT_CHECK(!t.is_view(), "cpu backend: a view of shape ", shape_str(t.shape()),
           " cannot take shape ", shape_str(shape), " or another layout");
  const DType dtype = md.data_type() == dt::bf16 ? DType::kBF16 : DType::kF32;
  RT_CHECK(md.data_type() == dt::bf16 || md.data_type() == dt::f32,
           "cpu backend: tensors are f32 or bf16, not oneDNN data type ", int(md.data_type()));
  bool plain = md == plain_desc(shape, md.data_type());
  size_t bytes = md.get_size();
  t = Tensor(shape, dtype, aligned_host_alloc(bytes), bytes,
             plain ? nullptr : std::make_shared<DnnlLayout>(md));
}

void ensure_vector(Tensor& t, int64_t n) {
  ensure(t, Shape{n}, plain_desc(Shape{n}));
}

void* SharedScratch::at_least(size_t bytes) {
  if (block_.empty() || block_.bytes() < bytes) {
    const int64_t floats =
        std::max<int64_t>(1, int64_t((bytes + sizeof(float) - 1) / sizeof(float)));
    ensure(block_, Shape{floats}, plain_desc(Shape{floats}));
  }
  return block_.raw();
}

void CachedReorder::run(const Context& ctx, const memory& src, const memory& dst) {
  memory::desc from = src.get_desc(), to = dst.get_desc();
  if (!prim_ || !(from == from_) || !(to == to_)) {
    prim_ = dnnl_try("building a reorder", [&] { return dnnl::reorder(src, dst); });
    from_ = from;
    to_ = to;
  }
  const auto start = std::chrono::steady_clock::now();
  prim_.execute(ctx.stream, const_cast<memory&>(src), const_cast<memory&>(dst));
  ctx.reorders.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ctx.reorders.calls += 1;
}

memory as_layout(const Context& ctx, const Tensor& t, const memory::desc& want, Tensor& scratch,
                 CachedReorder& reorder) {
  const memory src = mem_of(ctx, t);
  if (src.get_desc() == want) return src;
  ensure(scratch, t.shape(), want);
  memory dst = mem_of(ctx, scratch);
  reorder.run(ctx, src, dst);
  return dst;
}

memory as_layout(const Context& ctx, const memory& src, const memory::desc& want,
                 SharedScratch& scratch, CachedReorder& reorder) {
  if (src.get_desc() == want) return src;
  memory dst(want, ctx.engine, scratch.at_least(want.get_size()));
  reorder.run(ctx, src, dst);
  return dst;
}

memory as_layout(const Context& ctx, const Tensor& t, const memory::desc& want,
                 SharedScratch& scratch, CachedReorder& reorder) {
  return as_layout(ctx, mem_of(ctx, t), want, scratch, reorder);
}

void reorder_to(const Context& ctx, const memory& src, const memory& dst, CachedReorder& r) {
  r.run(ctx, src, dst);
}

}  // namespace ringtrain::backend::cpu
