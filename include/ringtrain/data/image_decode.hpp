// image_decode.hpp — PNG, JPEG and TIFF files into pixels (libpng, libjpeg-turbo, libtiff), and
// pixels into a model's input (channels, 8 bit, resize and centre crop, planar CHW).
//
// defines: Image, kDefaultMaxPixels, is_image_extension(), check_image_file(), decode_image(),
//          fit_image(), FitPlan, plan_fit()
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::data {

// A decoded image: interleaved HWC, values in [0, 2^bit_depth). channels is 1 (grey) or 3 (RGB):
// alpha is dropped, palettes expanded, 1/2/4-bit grey widened to 8 bit.
struct Image {
  int width = 0, height = 0, channels = 0;
  int bit_depth = 8;  // 8 or 16
  std::vector<uint16_t> pixels;
};

// True when path ends in .png .jpg .jpeg .tif or .tiff (any case).
bool is_image_extension(const std::string& path);

// The checks decode_image makes before decoding, without decoding: a known extension, a file
// that opens and is not empty. Throws the same InputError as decode_image.
void check_image_file(const std::string& path);

// The most pixels (width x height) decode_image accepts by default: 100 megapixels (10000 x
// 10000), 300 MB of 8-bit RGB as read and 600 MB as Image's 16-bit values. The header is read
// before anything is allocated, so a small file declaring a huge image (a decompression bomb: a
// 3.6 MB PNG declaring 60000 x 60000, 3.6 GB of grey decoded) is refused instead of taking the
// node's memory, however many threads decode at once.
constexpr int64_t kDefaultMaxPixels = 100'000'000;

// Decodes by extension. Throws ringtrain::InputError with one line naming the file: an unknown
// extension, a file that cannot be opened, an empty (0-byte) file, a header declaring more than
// max_pixels pixels (its width x height named, before any pixel is allocated), a corrupt or
// truncated image (the library's own message), a layout we do not read (e.g. a CMYK JPEG).
// Thread-safe: every library state is per call, and no library prints to stderr.
Image decode_image(const std::string& path, int64_t max_pixels = kDefaultMaxPixels);

// How fit_image maps an image to size x size: the resized (shorter side = size) dimensions and
// the centre crop's offsets into them.
struct FitPlan {
  int resized_width = 0, resized_height = 0;
  int crop_x = 0, crop_y = 0;
};
FitPlan plan_fit(int width, int height, int size);

// To the model's input: `channels` (1 = grey by ITU-R BT.601 luma, rounded; 3 = RGB, grey
// replicated), 8 bit (16-bit values scaled by 255/65535, rounded), resized so that the shorter
// side is `size` (area averaging, a box filter, when shrinking; bilinear with pixel centres at
// +0.5 when enlarging; each axis on its own), then centre-cropped to size x size (an odd
// excess drops the extra column or row at the end). size 0 keeps the image's size (the caller
// checks that sizes agree). Returns planar CHW uint8.
std::vector<uint8_t> fit_image(const Image& image, int channels, int size);

}  // namespace ringtrain::data
