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

}  // namespace ringtrain::backend::cpu
