// augment.cpp — crop, flip and normalise one image.
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

Normaliser::Normaliser(const std::vector<float>& mean, const std::vector<float>& std) {
  RT_CHECK(mean.size() == std.size(), "mean has ", mean.size(), " values, std ", std.size());
  lut_.resize(mean.size() * 256);
  for (size_t c = 0; c < mean.size(); ++c)
    for (int v = 0; v < 256; ++v)
      lut_[c * 256 + v] = float((v / 255.0 - double(mean[c])) / double(std[c]));
}

void transform_image(const uint8_t* in, int channels, int height, int width, const AugmentParams& p,
                     const Normaliser& norm, float* out) {
  const bool plain = p.dx == 0 && p.dy == 0 && !p.flip;
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
