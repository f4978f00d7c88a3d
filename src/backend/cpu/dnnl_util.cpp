// dnnl_util.cpp — layouts on Tensors, allocation and cached reorders for the oneDNN ops.
#include "dnnl_util.hpp"

#include "../factories.hpp"

namespace ringtrain::backend::cpu {

memory::dims to_dims(const Shape& shape) {
  return memory::dims(shape.begin(), shape.end());
}

memory::desc plain_desc(const Shape& shape) {
  switch (shape.size()) {
    case 1:
      return {to_dims(shape), dt::f32, tag::a};
    case 2:
      return {to_dims(shape), dt::f32, tag::ab};
    case 4:
      return {to_dims(shape), dt::f32, tag::abcd};
    default:
      RT_CHECK(false, "tensor of rank ", shape.size(), " ", shape_str(shape), " unsupported");
  }
}

memory::desc desc_of(const Tensor& t) {
  RT_CHECK(t.dtype() == DType::kF32, "cpu backend: ", dtype_name(t.dtype()), " not yet supported");
  if (t.layout()) return static_cast<const DnnlLayout&>(*t.layout()).md;
  return plain_desc(t.shape());
}

memory mem_of(const Context& ctx, const Tensor& t) {
  RT_CHECK(!t.empty(), "cpu backend: tensor used before it was computed");
  return memory(desc_of(t), ctx.engine, t.raw());
}

void ensure(Tensor& t, const Shape& shape, const memory::desc& md) {
  if (!t.empty() && t.shape() == shape && desc_of(t) == md) return;
  RT_CHECK(!t.is_view(), "cpu backend: a view of shape ", shape_str(t.shape()),
           " cannot take shape ", shape_str(shape), " or another layout");
  bool plain = md == plain_desc(shape);
  size_t bytes = md.get_size();
  t = Tensor(shape, DType::kF32, aligned_host_alloc(bytes), bytes,
             plain ? nullptr : std::make_shared<DnnlLayout>(md));
}

void CachedReorder::run(const Context& ctx, const memory& src, const memory& dst) {
  memory::desc from = src.get_desc(), to = dst.get_desc();
  if (!prim_ || !(from == from_) || !(to == to_)) {
    prim_ = dnnl_try("building a reorder", [&] { return dnnl::reorder(src, dst); });
    from_ = from;
    to_ = to;
  }
  prim_.execute(ctx.stream, const_cast<memory&>(src), const_cast<memory&>(dst));
}

memory as_layout(const Context& ctx, const Tensor& t, const memory::desc& want, Tensor& scratch,
                 CachedReorder& reorder) {
  return as_layout(ctx, mem_of(ctx, t), t.shape(), want, scratch, reorder);
}

memory as_layout(const Context& ctx, const memory& src, const Shape& shape,
                 const memory::desc& want, Tensor& scratch, CachedReorder& reorder) {
  if (src.get_desc() == want) return src;
  ensure(scratch, shape, want);
  memory dst = mem_of(ctx, scratch);
  reorder.run(ctx, src, dst);
  return dst;
}

void reorder_to(const Context& ctx, const memory& src, const memory& dst, CachedReorder& r) {
  r.run(ctx, src, dst);
}

}  // namespace ringtrain::backend::cpu
