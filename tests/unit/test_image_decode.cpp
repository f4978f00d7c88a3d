// test_image_decode.cpp — decode_image on PNG (8/16 bit, grey, RGB, RGBA), JPEG and TIFF files the
// test writes with the libraries, its one-line errors, and fit_image's exact pixels.
#include <boost/test/unit_test.hpp>
#include <filesystem>

#include "image_files.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/data/image_decode.hpp"
#include "temp_dir.hpp"

using namespace ringtrain;
using data::decode_image;
using data::fit_image;
using rt_test::TestImage;

namespace {

// Every channel, row and column changes the value, so a swapped channel or a transposed or
// flipped image cannot pass; 16-bit values use both bytes.
TestImage pattern(int w, int h, int c, int depth) {
  TestImage im{w, h, c, depth, {}};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        im.pixels.push_back(depth == 8 ? uint16_t((x * 37 + y * 11 + k * 89 + 5) % 256)
                                       : uint16_t((x * 4099 + y * 257 + k * 12345 + 3) % 65536));
  return im;
}

void check_exact(const data::Image& got, const TestImage& want, int channels) {
  BOOST_TEST(got.width == want.width);
  BOOST_TEST(got.height == want.height);
  BOOST_TEST(got.channels == channels);
  BOOST_TEST(got.bit_depth == want.depth);
  std::vector<uint16_t> expect;
  for (size_t i = 0; i < want.pixels.size(); ++i)
    if (int(i % want.channels) < channels) expect.push_back(want.pixels[i]);
  BOOST_TEST(got.pixels == expect, boost::test_tools::per_element());
}

std::string message_of(const std::string& path) {
  try {
    decode_image(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(image_decode)

BOOST_AUTO_TEST_CASE(png_grey_and_rgb_at_8_and_16_bits_exact) {
  const std::string dir = rt_test::temp_dir("png-exact");
  for (int channels : {1, 3})
    for (int depth : {8, 16}) {
      BOOST_TEST_CONTEXT("channels " << channels << " depth " << depth) {
        const TestImage im = pattern(7, 5, channels, depth);
        const std::string path = dir + "/a" + std::to_string(channels * depth) + ".png";
        rt_test::write_png_file(path, im);
        check_exact(decode_image(path), im, channels);
      }
    }
}

BOOST_AUTO_TEST_CASE(png_alpha_is_dropped_and_extension_case_ignored) {
  const std::string path = rt_test::temp_dir("png-alpha") + "/a.PNG";
  const TestImage im = pattern(6, 4, 4, 8);
  rt_test::write_png_file(path, im);
  check_exact(decode_image(path), im, 3);
}

// Quality 100 on a smooth gradient: libjpeg-turbo's DCT rounding and (for RGB) the YCbCr
// round trip stay within 2 levels (measured: 0 grey, 1 RGB); the stated tolerance.
BOOST_AUTO_TEST_CASE(jpeg_grey_and_rgb_within_2_levels) {
  const std::string dir = rt_test::temp_dir("jpeg");
  for (int channels : {1, 3}) {
    TestImage im{16, 16, channels, 8, {}};
    for (int y = 0; y < 16; ++y)
      for (int x = 0; x < 16; ++x)
        for (int k = 0; k < channels; ++k)
          im.pixels.push_back(uint16_t(40 + 4 * x + 3 * y + 30 * k));
    const std::string path =
        dir + "/a" + std::to_string(channels) + (channels == 1 ? ".jpg" : ".JPEG");
    rt_test::write_jpeg_file(path, im, 100);
    const data::Image got = decode_image(path);
    BOOST_TEST_REQUIRE(got.width == 16);
    BOOST_TEST_REQUIRE(got.height == 16);
    BOOST_TEST_REQUIRE(got.channels == channels);
    BOOST_TEST(got.bit_depth == 8);
    int worst = 0;
    for (size_t i = 0; i < im.pixels.size(); ++i)
      worst = std::max(worst, std::abs(int(got.pixels[i]) - int(im.pixels[i])));
    BOOST_TEST_MESSAGE("jpeg channels " << channels << ": max difference " << worst);
    BOOST_TEST(worst <= 2);
  }
}

BOOST_AUTO_TEST_CASE(tiff_grey_8bit_rgb_16bit_exact_min_is_white_inverted) {
  const std::string dir = rt_test::temp_dir("tiff");
  const TestImage grey = pattern(9, 4, 1, 8), rgb = pattern(5, 3, 3, 16);
  rt_test::write_tiff_file(dir + "/g.tif", grey, PHOTOMETRIC_MINISBLACK);
  rt_test::write_tiff_file(dir + "/c.TIFF", rgb, PHOTOMETRIC_RGB);
  check_exact(decode_image(dir + "/g.tif"), grey, 1);
  check_exact(decode_image(dir + "/c.TIFF"), rgb, 3);
  rt_test::write_tiff_file(dir + "/w.tif", grey, PHOTOMETRIC_MINISWHITE);
  TestImage inverted = grey;
  for (uint16_t& v : inverted.pixels) v = uint16_t(255 - v);
  check_exact(decode_image(dir + "/w.tif"), inverted, 1);
}

// A palette becomes RGB, 2-bit grey is widened to 8 bit (0, 85, 170, 255), tiles read exactly.
BOOST_AUTO_TEST_CASE(palette_low_bit_grey_and_tiled_tiff) {
  const std::string dir = rt_test::temp_dir("png-packed");
  const std::vector<png_color> palette{{10, 20, 30}, {200, 100, 0}, {7, 8, 9}};
  rt_test::write_png_packed(dir + "/p.png", 3, 2, 8, {0, 1, 2, 2, 1, 0}, palette);
  const TestImage rgb{
      3, 2, 3, 8, {10, 20, 30, 200, 100, 0, 7, 8, 9, 7, 8, 9, 200, 100, 0, 10, 20, 30}};
  check_exact(decode_image(dir + "/p.png"), rgb, 3);
  rt_test::write_png_packed(dir + "/g.png", 4, 1, 2, {0, 1, 2, 3}, {});
  check_exact(decode_image(dir + "/g.png"), TestImage{4, 1, 1, 8, {0, 85, 170, 255}}, 1);
  std::vector<uint8_t> grey;
  TestImage want{20, 18, 1, 8, {}};
  for (int i = 0; i < 20 * 18; ++i) grey.push_back(uint8_t(i * 7 % 256));
  want.pixels.assign(grey.begin(), grey.end());
  rt_test::write_tiled_tiff(dir + "/t.tif", 20, 18, grey);
  check_exact(decode_image(dir + "/t.tif"), want, 1);
}

BOOST_AUTO_TEST_CASE(bad_files_one_line_naming_the_file) {
  const std::string dir = rt_test::temp_dir("decode-bad");
  rt_test::write_bytes(dir + "/empty.png", "");
  BOOST_TEST(message_of(dir + "/empty.png") == dir + "/empty.png: empty file (0 bytes)");
  rt_test::write_bytes(dir + "/a.bmp", "BM");
  BOOST_TEST(
      message_of(dir + "/a.bmp") ==
      dir + "/a.bmp: unknown image extension '.bmp' (expected .png, .jpg, .jpeg, .tif or .tiff)");
  BOOST_TEST(message_of(dir + "/gone.png") ==
             dir + "/gone.png: cannot open (No such file or directory)");
  rt_test::write_bytes(dir + "/text.png", "not a png at all");
  BOOST_TEST(message_of(dir + "/text.png") ==
             dir + "/text.png: corrupt PNG (libpng: Not a PNG file)");

  rt_test::write_png_file(dir + "/full.png", pattern(32, 32, 3, 8));
  const std::string png = rt_test::read_bytes(dir + "/full.png");
  rt_test::write_bytes(dir + "/cut.png", png.substr(0, png.size() / 2));
  BOOST_TEST(message_of(dir + "/cut.png") == dir + "/cut.png: corrupt PNG (libpng: Read Error)");

  rt_test::write_jpeg_file(dir + "/full.jpg", pattern(32, 32, 3, 8), 90);
  const std::string jpeg = rt_test::read_bytes(dir + "/full.jpg");
  rt_test::write_bytes(dir + "/cut.jpg", jpeg.substr(0, jpeg.size() / 2));
  BOOST_TEST(message_of(dir + "/cut.jpg") ==
             dir + "/cut.jpg: corrupt JPEG (libjpeg: Premature end of JPEG file)");
  rt_test::write_bytes(dir + "/text.jpg", "not a jpeg");
  BOOST_TEST(message_of(dir + "/text.jpg") ==
             dir + "/text.jpg: corrupt JPEG (libjpeg: Not a JPEG file: starts with 0x6e 0x6f)");
  rt_test::write_bytes(dir + "/text.tif", "not a tiff");
  BOOST_TEST(message_of(dir + "/text.tif") == dir +
                                                  "/text.tif: corrupt TIFF (libtiff: Not a TIFF or "
                                                  "MDI file, bad magic number 28526 (0x6f6e))");
}

// A decompression bomb: a header declaring 60000 x 60000 pixels (3.6 GB at 8-bit grey) over a
// few bytes of data is refused from the header, before any pixel is allocated (under a 3 GB
// address-space limit the allocation itself threw std::bad_alloc), in each format.
BOOST_AUTO_TEST_CASE(a_header_over_the_pixel_limit_is_refused_before_decoding) {
  const std::string dir = rt_test::temp_dir("decode-bomb");
  rt_test::write_png_header_only(dir + "/bomb.png", 60000, 60000);
  rt_test::write_jpeg_header_claiming(dir + "/bomb.jpg", 60000, 60000);
  rt_test::write_tiff_header_only(dir + "/bomb.tif", 60000, 60000);
  for (const char* name : {"/bomb.png", "/bomb.jpg", "/bomb.tif"})
    BOOST_TEST(message_of(dir + name) ==
               dir + name +
                   ": 60000x60000 image (3600000000 pixels) is over the limit of 100000000 "
                   "pixels (--max-pixels)");
  // The limit is inclusive: 32 x 32 = 1024 pixels pass at 1024 and are refused at 1023.
  rt_test::write_png_file(dir + "/ok.png", pattern(32, 32, 3, 8));
  BOOST_TEST(data::decode_image(dir + "/ok.png", 1024).pixels.size() == 32u * 32 * 3);
  try {
    data::decode_image(dir + "/ok.png", 1023);
    BOOST_ERROR("1024 pixels passed a limit of 1023");
  } catch (const InputError& e) {
    BOOST_TEST(e.what() == dir + "/ok.png: 32x32 image (1024 pixels) is over the limit of 1023 "
                                 "pixels (--max-pixels)");
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(image_fit)

data::Image grey8(int w, int h, std::vector<uint16_t> pixels) {
  return data::Image{w, h, 1, 8, std::move(pixels)};
}

// v = 40y + 8x: each 2x2 block averages to exactly 80Y + 16X + 24.
data::Image ramp(int w, int h) {
  std::vector<uint16_t> px;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) px.push_back(uint16_t(40 * y + 8 * x));
  return grey8(w, h, px);
}

BOOST_AUTO_TEST_CASE(shrink_is_the_area_average) {
  const std::vector<uint8_t> want{24, 40, 104, 120};
  BOOST_TEST(fit_image(ramp(4, 4), 1, 2) == want, boost::test_tools::per_element());
}

// 8x4 -> shorter side 2 -> 4x2, centre crop keeps resized columns 1 and 2.
BOOST_AUTO_TEST_CASE(centre_crop_of_the_resized_image) {
  const std::vector<uint8_t> want{40, 56, 120, 136};
  BOOST_TEST(fit_image(ramp(8, 4), 1, 2) == want, boost::test_tools::per_element());
  const data::FitPlan p = data::plan_fit(10, 4, 2);
  BOOST_TEST(p.resized_width == 5);
  BOOST_TEST(p.resized_height == 2);
  BOOST_TEST(p.crop_x == 1);
  BOOST_TEST(p.crop_y == 0);
  const data::FitPlan q = data::plan_fit(4, 8, 2);
  BOOST_TEST((q.resized_width == 2 && q.resized_height == 4 && q.crop_x == 0 && q.crop_y == 1));
}

// Pixel centres at +0.5: 2 -> 4 samples at -0.25 (clamped), 0.25, 0.75, 1.25 (clamped).
BOOST_AUTO_TEST_CASE(enlarge_is_bilinear) {
  const std::vector<uint8_t> want{0,   25,  75, 100,  //
                                  50,  59,  76, 85,   // 58.75, 76.25 rounded
                                  150, 126, 79, 55,   // 126.25, 78.75 rounded
                                  200, 160, 80, 40};
  BOOST_TEST(fit_image(grey8(2, 2, {0, 100, 200, 40}), 1, 4) == want,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(channels_luma_replication_16bit_and_planar_order) {
  const data::Image rgb{4, 1, 3, 8, {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30}};
  const std::vector<uint8_t> luma{76, 150, 29, 18};  // (299R + 587G + 114B + 500) / 1000
  BOOST_TEST(fit_image(rgb, 1, 0) == luma, boost::test_tools::per_element());
  const std::vector<uint8_t> planar{255, 0, 0, 10, 0, 255, 0, 20, 0, 0, 255, 30};
  BOOST_TEST(fit_image(rgb, 3, 0) == planar, boost::test_tools::per_element());
  const data::Image deep{5, 1, 1, 16, {0, 128, 129, 32896, 65535}};
  const std::vector<uint8_t> scaled{0, 0, 1, 128, 255, 0, 0, 1, 128, 255, 0, 0, 1, 128, 255};
  BOOST_TEST(fit_image(deep, 3, 0) == scaled, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
