// image_fit.cpp — fit_image: an Image to the model's input (channels, 8 bit, resize, centre
// crop, planar CHW), with the resize as per-axis weight lists applied separably.
#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/image_decode.hpp"

namespace ringtrain::data {
namespace {

// One source pixel's share of an output pixel along one axis.
struct Tap {
  int source;
  double weight;
};
using AxisTaps = std::vector<std::vector<Tap>>;  // per output index

// Output index o covers the source interval [o*s, (o+1)*s), s = in/out; each source pixel
// weighs by its overlap, so every source pixel counts exactly as much as its area.
std::vector<Tap> box_taps(int o, int in, int out) {
  const double scale = double(in) / out, lo = o * scale, hi = (o + 1) * scale;
  std::vector<Tap> taps;
  for (int s = int(std::floor(lo)); s < std::min(in, int(std::ceil(hi))); ++s) {
    const double overlap = std::min(hi, s + 1.0) - std::max(lo, double(s));
    if (overlap > 0) taps.push_back({s, overlap / scale});
  }
  return taps;
}

// Pixel centres at +0.5 (as PyTorch's align_corners=False), clamped at the edges.
std::vector<Tap> bilinear_taps(int o, int in, int out) {
  const double x = std::clamp((o + 0.5) * in / out - 0.5, 0.0, double(in - 1));
  const int s0 = int(std::floor(x)), s1 = std::min(s0 + 1, in - 1);
  const double f = x - s0;
  return {{s0, 1 - f}, {s1, f}};
}

// Taps of the outputs [first, first + count) of an axis resized from `in` to `out` pixels.
AxisTaps axis_taps(int in, int out, int first, int count) {
  AxisTaps taps(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    const int o = first + i;
    if (out == in)
      taps[size_t(i)] = {{o, 1.0}};
    else
      taps[size_t(i)] = out < in ? box_taps(o, in, out) : bilinear_taps(o, in, out);
  }
  return taps;
}

// 8-bit value of a sample: 16-bit ones scaled by 255/65535, rounded.
uint8_t to_8bit(uint16_t v, int depth) {
  return depth == 16 ? uint8_t((uint32_t(v) * 255 + 32767) / 65535) : uint8_t(v);
}

// The image at its own size, 8 bit, as `channels` planes.
std::vector<uint8_t> planar_8bit(const Image& im, int channels) {
  const size_t n = size_t(im.width) * im.height;
  std::vector<uint8_t> out(n * channels);
  for (size_t i = 0; i < n; ++i) {
    uint8_t v[3];
    for (int k = 0; k < im.channels; ++k)
      v[k] = to_8bit(im.pixels[i * im.channels + k], im.bit_depth);
    if (im.channels == 1) v[1] = v[2] = v[0];
    if (channels == 1 && im.channels == 3)  // ITU-R BT.601 luma, rounded
      v[0] = uint8_t((299u * v[0] + 587u * v[1] + 114u * v[2] + 500) / 1000);
    for (int k = 0; k < channels; ++k) out[size_t(k) * n + i] = v[k];
  }
  return out;
}

}  // namespace

FitPlan plan_fit(int width, int height, int size) {
  if (size == 0) return {width, height, 0, 0};
  FitPlan p;
  const int shorter = std::min(width, height);
  auto scaled = [&](int side) {
    return std::max(size, int(std::lround(double(side) * size / shorter)));
  };
  p.resized_width = width <= height ? size : scaled(width);
  p.resized_height = width <= height ? scaled(height) : size;
  p.crop_x = (p.resized_width - size) / 2;
  p.crop_y = (p.resized_height - size) / 2;
  return p;
}

std::vector<uint8_t> fit_image(const Image& image, int channels, int size) {
  RT_CHECK(channels == 1 || channels == 3, "fit_image: channels ", channels);
  RT_CHECK(image.channels == 1 || image.channels == 3, "fit_image: image channels ",
           image.channels);
  RT_CHECK(size >= 0 && image.width > 0 && image.height > 0, "fit_image: size ", size);
  std::vector<uint8_t> planes = planar_8bit(image, channels);
  if (size == 0) return planes;
  const FitPlan p = plan_fit(image.width, image.height, size);
  const AxisTaps xs = axis_taps(image.width, p.resized_width, p.crop_x, size);
  const AxisTaps ys = axis_taps(image.height, p.resized_height, p.crop_y, size);
  const size_t w = size_t(image.width), h = size_t(image.height), s = size_t(size);
  std::vector<double> rows(h * s);  // one plane resized along x
  std::vector<uint8_t> out(size_t(channels) * s * s);
  for (int c = 0; c < channels; ++c) {
    const uint8_t* plane = planes.data() + size_t(c) * w * h;
    for (size_t y = 0; y < h; ++y)
      for (size_t x = 0; x < s; ++x) {
        double v = 0;
        for (const Tap& t : xs[x]) v += t.weight * plane[y * w + size_t(t.source)];
        rows[y * s + x] = v;
      }
    for (size_t y = 0; y < s; ++y)
      for (size_t x = 0; x < s; ++x) {
        double v = 0;
        for (const Tap& t : ys[y]) v += t.weight * rows[size_t(t.source) * s + x];
        out[(size_t(c) * s + y) * s + x] = uint8_t(std::clamp(std::lround(v), 0L, 255L));
      }
  }
  return out;
}

}  // namespace ringtrain::data
