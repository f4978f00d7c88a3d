// augment.hpp — per-sample augmentation (crop and flip, or the dihedral group of a square
// image), normalisation to floats, and the views of test-time augmentation.
//
// Deterministic from (seed, epoch, sample id), so independent of rank count and timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::data {

// The crop offset within [-pad, pad] (the crop's top-left in the zero-padded image is
// (pad + dy, pad + dx)); whether the source coordinates are transposed (square images only) and
// mirrored left-right (flip) and top-bottom (flip_y): transform_image's formula. transpose x
// flip x flip_y are the 8 elements of the square's dihedral group: the rotations by 90 degrees
// and the mirrorings.
struct AugmentParams {
  int dx = 0, dy = 0;
  bool flip = false;
  bool flip_y = false, transpose = false;
};

// none; crop (augment_pad) and horizontal flip; crop alone (images with a handedness, such as
// Fashion-MNIST's shoes, which all face one way); or one of the 8 rotations and mirrorings of a
// square image, no crop (fiber end faces: rotation-symmetric, centred).
enum class AugmentKind { kNone, kCropFlip, kCrop, kDihedral };
// data.augment's text: false, true (crop and flip), crop or dihedral.
AugmentKind parse_augment(const std::string& text);

// Drawn from (seed, epoch, sample id) alone, so it does not depend on rank count or timing.
AugmentParams augment_params(uint64_t seed, int epoch, int64_t sample_id, int pad);
AugmentParams dihedral_params(uint64_t seed, int epoch, int64_t sample_id);

// Test-time augmentation: the views whose predictions are averaged. none: the image; flip: it
// and its mirror image; dihedral: the 8 rotations and mirrorings (square images).
enum class TtaKind { kNone, kFlip, kDihedral };
TtaKind parse_tta(const std::string& text, const std::string& option);
std::vector<AugmentParams> tta_views(TtaKind kind);

// Applies a view (transpose, flips; no crop) to normalised floats [C, H, W].
void view_image(const float* in, int channels, int height, int width, const AugmentParams& view,
                float* out);

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
//   out(c, y, x) = norm_c(in(c, y' + dy, x' + dx)), (u, v) = transpose ? (x, y) : (y, x),
//   y' = flip_y ? H-1-u : u, x' = flip ? W-1-v : v,
// where a source pixel outside the image is a zero pixel (padding happens before
// normalisation, as with torchvision's RandomCrop(padding=4) then Normalize).
void transform_image(const uint8_t* in, int channels, int height, int width,
                     const AugmentParams& params, const Normaliser& norm, float* out);

}  // namespace ringtrain::data
