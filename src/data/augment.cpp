// augment.cpp — crop, flip, the dihedral group and normalisation of one image; the views of
// test-time augmentation.
#include "ringtrain/data/augment.hpp"

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/sampler.hpp"

namespace ringtrain::data {

AugmentParams augment_params(uint64_t seed, int epoch, int64_t sample_id, int pad) {
  Rng rng(mix_seed(seed, uint64_t(epoch), uint64_t(sample_id), 0x41554755ull));
  AugmentParams p;
  p.dy = int(rng.below(uint64_t(2 * pad + 1))) - pad;
  p.dx = int(rng.below(uint64_t(2 * pad + 1))) - pad;
  p.flip = (rng.next() >> 63) != 0;
  return p;
}

AugmentParams dihedral_params(uint64_t seed, int epoch, int64_t sample_id) {
  Rng rng(mix_seed(seed, uint64_t(epoch), uint64_t(sample_id), 0x44494845ull));
  const uint64_t element = rng.below(8);
  AugmentParams p;
  p.flip = (element & 1) != 0;
  p.flip_y = (element & 2) != 0;
  p.transpose = (element & 4) != 0;
  return p;
}

AugmentKind parse_augment(const std::string& text) {
  if (text == "false") return AugmentKind::kNone;
  if (text == "true") return AugmentKind::kCropFlip;
  if (text == "crop") return AugmentKind::kCrop;
  if (text == "dihedral") return AugmentKind::kDihedral;
  throw InputError(str("data.augment = ", text, ": expected false, true (crop and flip), crop or "
                       "dihedral"));
}

TtaKind parse_tta(const std::string& text, const std::string& option) {
  if (text == "none") return TtaKind::kNone;
  if (text == "flip") return TtaKind::kFlip;
  if (text == "dihedral") return TtaKind::kDihedral;
  throw InputError(str(option, " ", text, ": expected none, flip or dihedral"));
}

std::vector<AugmentParams> tta_views(TtaKind kind) {
  if (kind == TtaKind::kNone) return {AugmentParams{}};
  if (kind == TtaKind::kFlip) return {AugmentParams{}, AugmentParams{0, 0, true, false, false}};
  std::vector<AugmentParams> views;
  for (int element = 0; element < 8; ++element)
    views.push_back({0, 0, (element & 1) != 0, (element & 2) != 0, (element & 4) != 0});
  return views;
}

namespace {

// Where out(y, x) reads from: (u, v) = transpose ? (x, y) : (y, x), mirrored, then the crop's
// offset. Calls put(c, y, x, sy, sx) for every output value.
template <typename Put>
void for_each_source(int channels, int height, int width, const AugmentParams& p, Put put) {
  RT_CHECK(!p.transpose || height == width, "a transposed view of a ", height, "x", width,
           " image");
  for (int c = 0; c < channels; ++c)
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x) {
        int u = p.transpose ? x : y, v = p.transpose ? y : x;
        if (p.flip_y) u = height - 1 - u;
        if (p.flip) v = width - 1 - v;
        put(c, y, x, u + p.dy, v + p.dx);
      }
}

}  // namespace

void view_image(const float* in, int channels, int height, int width, const AugmentParams& view,
                float* out) {
  const AugmentParams no_crop{0, 0, view.flip, view.flip_y, view.transpose};
  const size_t plane = size_t(height) * size_t(width);
  for_each_source(channels, height, width, no_crop, [&](int c, int y, int x, int sy, int sx) {
    out[c * plane + size_t(y) * width + x] = in[c * plane + size_t(sy) * width + sx];
  });
}

Normaliser::Normaliser(const std::vector<float>& mean, const std::vector<float>& std) {
  RT_CHECK(mean.size() == std.size(), "mean has ", mean.size(), " values, std ", std.size());
  lut_.resize(mean.size() * 256);
  for (size_t c = 0; c < mean.size(); ++c)
    for (int v = 0; v < 256; ++v)
      lut_[c * 256 + v] = float((v / 255.0 - double(mean[c])) / double(std[c]));
}

void transform_image(const uint8_t* in, int channels, int height, int width, const AugmentParams& p,
                     const Normaliser& norm, float* out) {
  const bool plain = p.dx == 0 && p.dy == 0 && !p.flip && !p.flip_y && !p.transpose;
  if (p.flip_y || p.transpose) {  // the dihedral group's other elements: the general walk
    const size_t plane = size_t(height) * size_t(width);
    for_each_source(channels, height, width, p, [&](int c, int y, int x, int sy, int sx) {
      const bool inside = sy >= 0 && sy < height && sx >= 0 && sx < width;
      out[c * plane + size_t(y) * width + x] =
          norm.channel(c)[inside ? in[c * plane + size_t(sy) * width + sx] : 0];
    });
    return;
  }
  for (int c = 0; c < channels; ++c) {
    const float* lut = norm.channel(c);
    const uint8_t* plane = in + size_t(c) * height * width;
    float* dst = out + size_t(c) * height * width;
    if (plain) {
      for (int i = 0; i < height * width; ++i) dst[i] = lut[plane[i]];
      continue;
    }
    for (int y = 0; y < height; ++y) {
      const int sy = y + p.dy;
      float* row = dst + size_t(y) * width;
      if (sy < 0 || sy >= height) {
        for (int x = 0; x < width; ++x) row[x] = lut[0];
        continue;
      }
      const uint8_t* src = plane + size_t(sy) * width;
      for (int x = 0; x < width; ++x) {
        const int sx = (p.flip ? width - 1 - x : x) + p.dx;
        row[x] = lut[(sx >= 0 && sx < width) ? src[sx] : 0];
      }
    }
  }
}

}  // namespace ringtrain::data
