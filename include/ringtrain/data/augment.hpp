// augment.hpp — per-sample crop-and-flip augmentation and normalisation to floats.
//
// Deterministic from (seed, epoch, sample id), so independent of rank count and timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringtrain::data {

// The crop offset within [-pad, pad] (the crop's top-left in the zero-padded image is
// (pad + dy, pad + dx)) and whether the crop is then mirrored left-right.
struct AugmentParams {
  int dx = 0, dy = 0;
  bool flip = false;
};

// Drawn from (seed, epoch, sample id) alone, so it does not depend on rank count or timing.
AugmentParams augment_params(uint64_t seed, int epoch, int64_t sample_id, int pad);

// Per-channel lookup from a pixel to (pixel/255 - mean[c]) / std[c].
class Normaliser {
 public:
  Normaliser() = default;
  Normaliser(const std::vector<float>& mean, const std::vector<float>& std);
  const float* channel(int c) const { return lut_.data() + size_t(c) * 256; }

 private:
  std::vector<float> lut_;
};

// Writes image in [C, H, W] as floats into out:
//   out(c, y, x) = norm_c(in(c, y + dy, x' + dx)),  x' = flip ? W-1-x : x,
// where a source pixel outside the image is a zero pixel (padding happens before
// normalisation, as with torchvision's RandomCrop(padding=4) then Normalize).
void transform_image(const uint8_t* in, int channels, int height, int width,
                     const AugmentParams& params, const Normaliser& norm, float* out);

}  // namespace ringtrain::data
