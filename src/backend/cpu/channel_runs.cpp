// channel_runs.cpp — a oneDNN memory desc read as channel runs.
#include "channel_runs.hpp"

namespace ringtrain::backend::cpu {

// md's runs, or false where md is not 4-D with channels in unit-stride runs.
bool channel_runs(const memory::desc& md, ChannelRuns& out) {
  const auto& d = md.data;
  if (d.ndims != 4 || d.format_kind != dnnl_blocked) return false;
  const auto& blk = d.format_desc.blocking;
  out.image_stride = blk.strides[0];
  out.run_stride = blk.strides[1];
  out.row_stride = blk.strides[2];
  out.pixel_stride = blk.strides[3];
  out.offset0 = d.offset0;
  if (blk.inner_nblks == 1 && blk.inner_idxs[0] == 1) {
    out.lanes = blk.inner_blks[0];
    out.runs = d.padded_dims[1] / out.lanes;
    return true;
  }
  if (blk.inner_nblks != 0) return false;
  const bool channels_last = blk.strides[1] == 1 && d.dims[1] > 1;
  out.lanes = channels_last ? d.dims[1] : 1;
  out.runs = channels_last ? 1 : d.dims[1];
  return true;
}

namespace {

// y's layout: x's, at the pooled size.
bool pooled_desc(const memory::desc& x, const ChannelRuns& runs, const memory::dims& dims,
                 memory::desc& out) {
  const auto& blk = x.data.format_desc.blocking;
  tag t = tag::undef;
  if (blk.inner_nblks == 1) {
    t = runs.lanes == 16 ? tag::nChw16c : runs.lanes == 8 ? tag::nChw8c : tag::undef;
  } else {
    t = runs.runs == 1 && runs.lanes > 1 ? tag::nhwc : tag::nchw;
  }
  if (t == tag::undef) return false;
  out = memory::desc(dims, x.data_type(), t);
  return true;
}

}  // namespace

bool pooled_planes(const memory::desc& x_md, int64_t window, int pack, PooledPlanes& g,
                   memory::desc& y_md) {
  const auto& d = x_md.data;
  if (d.ndims != 4 || d.dims[2] < window || d.dims[3] < window) return false;
  g.n = d.dims[0], g.h = d.dims[2], g.w = d.dims[3], g.k = window;
  g.oh = g.h / window, g.ow = g.w / window, g.pack = pack;
  return channel_runs(x_md, g.x) && pooled_desc(x_md, g.x, {g.n, d.dims[1], g.oh, g.ow}, y_md) &&
         channel_runs(y_md, g.y) && g.y.lanes == g.x.lanes && g.walkable();
}

const PooledPlan* PooledPlans::plan(const memory::desc& x_md, int64_t window, int pack, bool walk) {
  for (const auto& p : plans_)
    if (p->x_md == x_md) return p.get();
  for (const auto& md : unwalkable_)
    if (md == x_md) return nullptr;
  auto p = std::make_unique<PooledPlan>();
  p->x_md = x_md;
  p->channels = x_md.data.dims[1];
  if (!walk || !pooled_planes(x_md, window, pack, p->g, p->y_md)) {
    unwalkable_.push_back(x_md);
    return nullptr;
  }
  plans_.push_back(std::move(p));
  return plans_.back().get();
}

}  // namespace ringtrain::backend::cpu
