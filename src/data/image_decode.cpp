// image_decode.cpp — decode_image: PNG (libpng), JPEG (libjpeg-turbo), TIFF (libtiff) into Image.
//
// libpng and libjpeg report errors by longjmp. Each decoder keeps every piece of state in one
// struct owned by the caller (whose destructor frees the library's structs and the FILE), and
// the function that calls setjmp holds no C++ object of its own, so a longjmp skips no
// destructor and clobbers no local.
#include "ringtrain/data/image_decode.hpp"

#include <jpeglib.h>
#include <png.h>
#include <tiffio.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csetjmp>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ringtrain/core/error.hpp"

namespace ringtrain::data {
namespace {

enum class Format { kPng, kJpeg, kTiff, kUnknown };

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

Format format_of(const std::string& path) {
  const std::string ext = lower_extension(path);
  if (ext == ".png") return Format::kPng;
  if (ext == ".jpg" || ext == ".jpeg") return Format::kJpeg;
  if (ext == ".tif" || ext == ".tiff") return Format::kTiff;
  return Format::kUnknown;
}

void require_known_extension(const std::string& path) {
  RT_REQUIRE_INPUT(format_of(path) != Format::kUnknown, path, ": unknown image extension '",
                   std::filesystem::path(path).extension().string(),
                   "' (expected .png, .jpg, .jpeg, .tif or .tiff)");
}

// Opens path for reading; an unopenable or 0-byte file is an InputError naming it.
std::FILE* open_nonempty(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  RT_REQUIRE_INPUT(f, path, ": cannot open (", std::strerror(errno), ")");
  const bool empty = std::fgetc(f) == EOF;
  if (empty || std::fseek(f, 0, SEEK_SET) != 0) {
    const bool failed = std::ferror(f) || !empty;  // a folder, an I/O error: not "empty"
    const int why = errno;
    std::fclose(f);
    RT_REQUIRE_INPUT(failed, path, ": empty file (0 bytes)");
    throw InputError(str(path, ": cannot read (", std::strerror(why), ")"));
  }
  return f;
}

// A header's size against the limit, before a pixel is allocated: a small file may declare an
// image of gigabytes (a decompression bomb), and the allocation would end the whole run.
void require_within_limit(const std::string& path, uint64_t width, uint64_t height,
                          int64_t max_pixels) {
  const uint64_t pixels = width * height;  // each below 2^32: no overflow
  RT_REQUIRE_INPUT(pixels <= uint64_t(max_pixels), path, ": ", width, "x", height, " image (",
                   pixels, " pixels) is over the limit of ", max_pixels, " pixels (--max-pixels)");
}

// Interleaved samples of 8 or 16 bits (16-bit ones big-endian when big_endian) into an Image.
Image image_from_bytes(int width, int height, int channels, int depth, const uint8_t* bytes,
                       size_t row_stride, bool big_endian) {
  Image out{width, height, channels, depth, {}};
  out.pixels.resize(size_t(width) * height * channels);
  const size_t row_values = size_t(width) * channels;
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = bytes + size_t(y) * row_stride;
    uint16_t* dst = out.pixels.data() + size_t(y) * row_values;
    for (size_t i = 0; i < row_values; ++i) {
      if (depth == 8)
        dst[i] = row[i];
      else
        dst[i] = big_endian ? uint16_t(row[2 * i] << 8 | row[2 * i + 1])
                            : uint16_t(row[2 * i + 1] << 8 | row[2 * i]);
    }
  }
  return out;
}

// ---- PNG ------------------------------------------------------------------------------------

struct PngRead {
  std::FILE* file = nullptr;
  png_structp png = nullptr;
  png_infop info = nullptr;
  char error[256] = "";
  int64_t max_pixels = 0;
  png_uint_32 width = 0, height = 0;
  int channels = 0, depth = 0;
  bool too_large = false;
  std::vector<uint8_t> bytes;
  std::vector<png_bytep> rows;
  ~PngRead() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    if (file) std::fclose(file);
  }
};

void png_fail(png_structp png, png_const_charp message) {
  auto* r = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(r->error, sizeof r->error, "%s", message);
  png_longjmp(png, 1);
}
void png_ignore_warning(png_structp, png_const_charp) {}

// Grey or RGB of 8 or 16 bits whatever the file holds: palettes expanded, alpha dropped.
void png_normalise(PngRead& r) {
  const int colour = png_get_color_type(r.png, r.info);
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r.png);
  if (colour == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(r.png, r.info) < 8)
    png_set_expand_gray_1_2_4_to_8(r.png);
  if (colour & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(r.png);
  png_read_update_info(r.png, r.info);
}

bool png_decode(PngRead& r) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_init_io(r.png, r.file);
  png_read_info(r.png, r.info);
  r.width = png_get_image_width(r.png, r.info);
  r.height = png_get_image_height(r.png, r.info);
  if (uint64_t(r.width) * r.height > uint64_t(r.max_pixels)) {
    r.too_large = true;
    return false;
  }
  png_normalise(r);
  r.channels = png_get_channels(r.png, r.info);
  r.depth = png_get_bit_depth(r.png, r.info);
  const size_t stride = png_get_rowbytes(r.png, r.info);
  r.bytes.resize(stride * size_t(r.height));
  r.rows.resize(size_t(r.height));
  for (size_t y = 0; y < r.height; ++y) r.rows[y] = r.bytes.data() + y * stride;
  png_read_image(r.png, r.rows.data());
  png_read_end(r.png, nullptr);
  return true;
}

Image decode_png(const std::string& path, int64_t max_pixels) {
  PngRead r;
  r.max_pixels = max_pixels;
  r.file = open_nonempty(path);
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, png_fail, png_ignore_warning);
  if (r.png) r.info = png_create_info_struct(r.png);
  RT_CHECK(r.png && r.info, path, ": libpng could not start");
  const bool ok = png_decode(r);
  if (r.too_large) require_within_limit(path, r.width, r.height, max_pixels);
  RT_REQUIRE_INPUT(ok, path, ": corrupt PNG (libpng: ", r.error, ")");
  return image_from_bytes(int(r.width), int(r.height), r.channels, r.depth, r.bytes.data(),
                          png_get_rowbytes(r.png, r.info), true);
}

// ---- JPEG -----------------------------------------------------------------------------------

struct JpegRead {
  std::FILE* file = nullptr;
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr jerr{};
  std::jmp_buf jump;
  int64_t max_pixels = 0;
  bool created = false, cmyk = false, too_large = false;
  char error[JMSG_LENGTH_MAX] = "";
  std::vector<uint8_t> bytes;
  ~JpegRead() {
    if (created) jpeg_destroy_decompress(&cinfo);
    if (file) std::fclose(file);
  }
};

void jpeg_fail(j_common_ptr c) {
  auto* r = static_cast<JpegRead*>(c->client_data);
  (*c->err->format_message)(c, r->error);
  std::longjmp(r->jump, 1);
}
// A warning (level -1) means damaged data, e.g. "Premature end of JPEG file": libjpeg would
// fill the rest with grey, so a truncated file is an error, not a quietly wrong image.
void jpeg_message(j_common_ptr c, int level) {
  if (level < 0) jpeg_fail(c);
}

bool jpeg_decode(JpegRead& r) {
  if (setjmp(r.jump)) return false;
  jpeg_create_decompress(&r.cinfo);
  r.created = true;
  jpeg_stdio_src(&r.cinfo, r.file);
  jpeg_read_header(&r.cinfo, TRUE);
  if (uint64_t(r.cinfo.image_width) * r.cinfo.image_height > uint64_t(r.max_pixels)) {
    r.too_large = true;
    return false;
  }
  if (r.cinfo.jpeg_color_space == JCS_CMYK || r.cinfo.jpeg_color_space == JCS_YCCK) {
    r.cmyk = true;
    return false;
  }
  r.cinfo.out_color_space = r.cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&r.cinfo);
  const size_t stride = size_t(r.cinfo.output_width) * r.cinfo.output_components;
  r.bytes.resize(stride * r.cinfo.output_height);
  while (r.cinfo.output_scanline < r.cinfo.output_height) {
    JSAMPROW row = r.bytes.data() + size_t(r.cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&r.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&r.cinfo);
  return true;
}

Image decode_jpeg(const std::string& path, int64_t max_pixels) {
  JpegRead r;
  r.max_pixels = max_pixels;
  r.file = open_nonempty(path);
  r.cinfo.err = jpeg_std_error(&r.jerr);
  r.jerr.error_exit = jpeg_fail;
  r.jerr.emit_message = jpeg_message;
  r.cinfo.client_data = &r;
  const bool ok = jpeg_decode(r);
  if (r.too_large)
    require_within_limit(path, r.cinfo.image_width, r.cinfo.image_height, max_pixels);
  RT_REQUIRE_INPUT(!r.cmyk, path, ": CMYK JPEG is not supported (save it as RGB)");
  RT_REQUIRE_INPUT(ok, path, ": corrupt JPEG (libjpeg: ", r.error, ")");
  const int w = int(r.cinfo.output_width), c = r.cinfo.output_components;
  return image_from_bytes(w, int(r.cinfo.output_height), c, 8, r.bytes.data(), size_t(w) * c, true);
}

// ---- TIFF -----------------------------------------------------------------------------------

struct TiffRead {
  TIFFOpenOptions* options = nullptr;
  TIFF* tif = nullptr;
  char error[256] = "";
  ~TiffRead() {
    if (tif) TIFFClose(tif);
    if (options) TIFFOpenOptionsFree(options);
  }
};

int tiff_error(TIFF*, void* user, const char*, const char* format, va_list args) {
  auto* r = static_cast<TiffRead*>(user);
  if (!r->error[0]) std::vsnprintf(r->error, sizeof r->error, format, args);
  return 1;  // handled: libtiff's global handler would print it on stderr
}
// Warnings (unknown tags and the like) come with valid files: ignored, never printed.
int tiff_warning(TIFF*, void*, const char*, const char*, va_list) {
  return 1;
}

struct TiffLayout {
  uint32_t width = 0, height = 0;
  uint16_t samples = 1, bits = 1, photometric = 0, planar = PLANARCONFIG_CONTIG,
           format = SAMPLEFORMAT_UINT;
  // Grey or RGB, 8 or 16 bits, interleaved strips of unsigned samples: read as stored.
  bool direct() const {
    const bool grey =
        photometric == PHOTOMETRIC_MINISBLACK || photometric == PHOTOMETRIC_MINISWHITE;
    const bool rgb = photometric == PHOTOMETRIC_RGB && samples >= 3;
    return (bits == 8 || bits == 16) && (grey || rgb) && planar == PLANARCONFIG_CONTIG &&
           format == SAMPLEFORMAT_UINT;
  }
  int channels() const { return photometric == PHOTOMETRIC_RGB ? 3 : 1; }
};

TiffLayout tiff_layout(TIFF* tif) {
  TiffLayout l;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &l.width);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &l.height);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &l.samples);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &l.bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &l.planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &l.format);
  if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &l.photometric))
    l.photometric = l.samples >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK;
  if (TIFFIsTiled(tif)) l.planar = 0;  // tiles go through the RGBA reader
  return l;
}

// Scanlines as stored (first `channels` samples of each pixel kept; min-is-white inverted).
Image tiff_read_direct(const std::string& path, TiffRead& r, const TiffLayout& l) {
  const size_t stride = size_t(TIFFScanlineSize(r.tif));
  std::vector<uint8_t> line(stride);
  const int c = l.channels(), bytes_per = l.bits / 8;
  Image out{int(l.width), int(l.height), c, l.bits, {}};
  out.pixels.resize(size_t(l.width) * l.height * c);
  const uint16_t max = uint16_t((1u << l.bits) - 1);
  for (uint32_t y = 0; y < l.height; ++y) {
    RT_REQUIRE_INPUT(TIFFReadScanline(r.tif, line.data(), y, 0) >= 0, path,
                     ": corrupt TIFF (libtiff: ", r.error, ")");
    for (uint32_t x = 0; x < l.width; ++x)
      for (int k = 0; k < c; ++k) {
        const size_t at = (size_t(x) * l.samples + k) * bytes_per;
        uint16_t v = line[at];
        if (bytes_per == 2) std::memcpy(&v, &line[at], 2);  // libtiff gives host order
        if (l.photometric == PHOTOMETRIC_MINISWHITE) v = uint16_t(max - v);
        out.pixels[(size_t(y) * l.width + x) * c + k] = v;
      }
  }
  return out;
}

// Anything else libtiff can read (tiles, palettes, bilevel, YCbCr, ...): its RGBA reader, 8 bit.
Image tiff_read_rgba(const std::string& path, TiffRead& r, const TiffLayout& l) {
  std::vector<uint32_t> raster(size_t(l.width) * l.height);
  RT_REQUIRE_INPUT(
      TIFFReadRGBAImageOriented(r.tif, l.width, l.height, raster.data(), ORIENTATION_TOPLEFT, 0),
      path, ": corrupt or unsupported TIFF (libtiff: ", r.error, ")");
  const int c = l.channels();
  Image out{int(l.width), int(l.height), c, 8, {}};
  out.pixels.resize(raster.size() * c);
  for (size_t i = 0; i < raster.size(); ++i) {
    const uint32_t p = raster[i];
    const uint16_t rgb[3] = {uint16_t(TIFFGetR(p)), uint16_t(TIFFGetG(p)), uint16_t(TIFFGetB(p))};
    for (int k = 0; k < c; ++k) out.pixels[i * c + k] = rgb[k];
  }
  return out;
}

Image decode_tiff(const std::string& path, int64_t max_pixels) {
  std::fclose(open_nonempty(path));  // the same messages as the other formats for these cases
  TiffRead r;
  r.options = TIFFOpenOptionsAlloc();
  TIFFOpenOptionsSetErrorHandlerExtR(r.options, tiff_error, &r);
  TIFFOpenOptionsSetWarningHandlerExtR(r.options, tiff_warning, &r);
  r.tif = TIFFOpenExt(path.c_str(), "r", r.options);
  RT_REQUIRE_INPUT(r.tif, path, ": corrupt TIFF (libtiff: ", r.error, ")");
  const TiffLayout layout = tiff_layout(r.tif);
  RT_REQUIRE_INPUT(layout.width > 0 && layout.height > 0, path, ": TIFF has no pixels");
  require_within_limit(path, layout.width, layout.height, max_pixels);
  return layout.direct() ? tiff_read_direct(path, r, layout) : tiff_read_rgba(path, r, layout);
}

}  // namespace

bool is_image_extension(const std::string& path) {
  return format_of(path) != Format::kUnknown;
}

void check_image_file(const std::string& path) {
  require_known_extension(path);
  std::fclose(open_nonempty(path));
}

Image decode_image(const std::string& path, int64_t max_pixels) {
  require_known_extension(path);
  switch (format_of(path)) {
    case Format::kPng:
      return decode_png(path, max_pixels);
    case Format::kJpeg:
      return decode_jpeg(path, max_pixels);
    case Format::kTiff:
      return decode_tiff(path, max_pixels);
    case Format::kUnknown:
      break;
  }
  throw Error(str(path, ": no decoder"));  // unreachable: the extension was checked
}

}  // namespace ringtrain::data
