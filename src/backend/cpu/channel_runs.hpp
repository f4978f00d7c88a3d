// channel_runs.hpp — oneDNN's activation layouts as runs of channels side by side at every
// pixel, for the cpu backend's own loops over them (batch statistics, the fused stem, batch
// norm with a residual, max pool + ReLU), and the pooling loops' walks by layout. Internal to
// src/backend/cpu.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "dnnl_util.hpp"
#include "lane_pack.hpp"
#include "ringtrain/core/bf16.hpp"

namespace ringtrain::backend::cpu {

// A 4-D layout as runs of channels, each lane one channel at stride 1: nChw16c has runs of 16
// (the last padded with zeros up to 16), nhwc one run of all C, nchw C runs of 1.
struct ChannelRuns {
  int64_t lanes = 0, runs = 0;
  int64_t run_stride = 0, image_stride = 0, row_stride = 0, pixel_stride = 0, offset0 = 0;
  // Offset of the first lane of run r at pixel (h, w) of image n.
  int64_t at(int64_t n, int64_t r, int64_t h, int64_t w) const {
    return offset0 + n * image_stride + r * run_stride + h * row_stride + w * pixel_stride;
  }
};

// md's runs, or false where md is not 4-D with channels in unit-stride runs.
bool channel_runs(const memory::desc& md, ChannelRuns& out);

// An [n, C, h, w] activation walked one (image, run) plane per OpenMP iteration: each plane's
// sums are its own, so totals that add them in one order are the same bits at any thread
// count. The loops take lanes N at a time (LanePack<N>): they walk layouts whose runs hold a
// multiple of 8 lanes (walkable).
struct Planes {
  ChannelRuns x;
  int64_t n = 0, h = 0, w = 0;
  int pack = 8;  // the widest pack the loops may take (Context::pack_lanes)
  int64_t count() const { return n * x.runs; }
  int64_t image(int64_t plane) const { return plane / x.runs; }
  int64_t run(int64_t plane) const { return plane % x.runs; }
  bool walkable() const { return x.lanes % 8 == 0; }
};

// A window x window max pool of stride window over Planes (rows and columns past the last whole
// tile dropped): y [n, C, oh, ow] in x's layout. The loops that pool keep, for every lane of
// every tile, the place in the tile of the value the pool took (or kNoWinner), at tile_at.
struct PooledPlanes : Planes {
  ChannelRuns y;
  int64_t oh = 0, ow = 0, k = 0;
  int64_t tiles() const { return count() * oh * ow * x.lanes; }
  int64_t tile_at(int64_t plane, int64_t row, int64_t col) const {
    return ((plane * oh + row) * ow + col) * x.lanes;
  }
};

constexpr uint8_t kNoWinner = 0xff;  // a tile whose values a ReLU cut to 0: no gradient

// The input-gradient passes of the pooling loops: for each pixel of one plane at lanes lp..lp+N
// in row order, f(h, w, dz, tiled), dz the pooled gradient dy at its tile's winner and 0 at the
// tile's other places; tiled false (dz 0) in the rows and columns past the last whole tile.
template <int N, typename T, typename F>
void for_each_pooled_input(const PooledPlanes& g, int64_t plane, int64_t lp, const T* dy,
                           const uint8_t* winners, F&& f) {
  using P = LanePack<N>;
  using V = typename P::F;
  const int64_t img = g.image(plane), run = g.run(plane), k = g.k;
  for (int64_t h = 0; h < g.h; ++h) {
    const int64_t oh = h / k, i = h % k;
    int64_t w = 0;
    if (oh < g.oh)
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const V d = P::load(dy + g.y.at(img, run, oh, ow) + lp);
        const typename P::I won = P::load_bytes(winners + g.tile_at(plane, oh, ow) + lp);
        for (int64_t j = 0; j < k; ++j, ++w) f(h, w, P::keep(d, won == int32_t(i * k + j)), true);
      }
    for (; w < g.w; ++w) f(h, w, V{}, false);
  }
}

// The walk of an [n, channels, h, w] x in layout x_md pooled by window x window tiles, and y's
// layout (x's, at the pooled size: what oneDNN's pool would write); false where the loops do
// not walk x_md (its runs are not a multiple of 8 lanes, or not one of the layouts above).
bool pooled_planes(const memory::desc& x_md, int64_t window, int pack, PooledPlanes& g,
                   memory::desc& y_md);

// A pooling op's walks by x's layout, each planned on first sight: the layouts, the channels and
// the walk, or none where the loops do not walk that layout (the op's composed ops run).
struct PooledPlan {
  memory::desc x_md, y_md;
  int64_t channels = 0;
  PooledPlanes g;
};

class PooledPlans {
 public:
  // The plan for x_md ([n, channels, h, w], each side at least window), or null where the loops
  // do not walk it or `walk` is false.
  const PooledPlan* plan(const memory::desc& x_md, int64_t window, int pack, bool walk);

 private:
  std::vector<std::unique_ptr<PooledPlan>> plans_;
  std::vector<memory::desc> unwalkable_;
};

// Pixels a plane's loops sum in fp32 before adding the sums to its fp64 ones: whole rows,
// about this many (a 4x4 plane's sums are one fp64 addition per lane).
constexpr int64_t kPixelsPerFp32Sum = 256;

// The widest pack of lanes this build's loops take: 16 where it targets AVX-512, else 8 (a
// 64-byte vector without AVX-512 is two registers and has no calling convention: GCC warns,
// -Wpsabi). The bundle's x86-64-v3 build takes 8.
constexpr int kWidestPack =
#if defined(__AVX512F__)
    16;
#else
    8;
#endif

// Calls f(std::integral_constant<int, N>) with the widest pack that divides the lanes and that
// p allows: 16 (nChw16c, nhwc) or 8. Each lane's arithmetic is the same at either width.
template <typename F>
void with_pack(const Planes& p, F&& f) {
#if defined(__AVX512F__)
  if (p.pack >= 16 && p.x.lanes % 16 == 0) return f(std::integral_constant<int, 16>());
#else
  (void)p;
#endif
  f(std::integral_constant<int, 8>());
}

// Calls f(std::bool_constant<on>): a run-time choice as a template's.
template <typename F>
void with_flag(bool on, F&& f) {
  if (on)
    f(std::true_type());
  else
    f(std::false_type());
}

// A per-channel array over runs x lanes: f(c) on the channels, 0 on padding lanes.
template <typename F>
const float* per_lane(const ChannelRuns& r, int64_t channels, std::vector<float>& out, F&& f) {
  out.assign(size_t(r.runs * r.lanes), 0.0f);
  for (int64_t c = 0; c < channels; ++c) out[size_t(c)] = f(c);
  return out.data();
}

// The loops' per-plane fp64 sums (two of them) are laid out [plane][which][lane], so that a
// pack's lanes add to contiguous doubles: the first sum of lane lp of a plane, the second
// lying p.x.lanes on.
inline double* plane_sums_at(double* sums, const Planes& p, int64_t plane, int64_t lp) {
  return sums + plane * 2 * p.x.lanes + lp;
}

// Each channel's totals of those sums over the images in order, into `totals` laid out
// [which][run * lanes + lane]: channel c's first at c, its second at runs * lanes + c. The
// images' planes are added one after another, a run's lanes side by side: contiguous adds, where
// a walk channel by channel reads one double per image scattered across the sums (for 512
// channels of 4x4 images it cost a small batch norm as much as its passes).
inline void channel_totals(const std::vector<double>& sums, const Planes& p,
                           std::vector<double>& totals) {
  const int64_t L = p.x.lanes, width = p.x.runs * L;
  totals.assign(size_t(2 * width), 0.0);
  for (int64_t img = 0; img < p.n; ++img)
    for (int64_t run = 0; run < p.x.runs; ++run)
      for (int64_t which = 0; which < 2; ++which) {
        const double* from = sums.data() + ((img * p.x.runs + run) * 2 + which) * L;
        double* to = totals.data() + which * width + run * L;
        for (int64_t l = 0; l < L; ++l) to[l] += from[l];
      }
}

inline float value_at(const float* p) {
  return *p;
}
inline float value_at(const uint16_t* p) {
  return bf16_to_float(*p);
}

}  // namespace ringtrain::backend::cpu
