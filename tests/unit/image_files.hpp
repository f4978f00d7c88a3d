// image_files.hpp — writes small PNG, JPEG and TIFF files with the libraries themselves, so the
// decoder tests read images whose every pixel is known.
#pragma once

#include <jpeglib.h>
#include <png.h>
#include <tiffio.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace rt_test {

// Interleaved HWC samples of 8 or 16 bits, 1 (grey), 3 (RGB) or 4 (RGBA) channels.
struct TestImage {
  int width, height, channels, depth;
  std::vector<uint16_t> pixels;
};

// libpng's write structs on an open file, freed and closed whatever happens. (setjmp stays in
// each writer: it must be called in the frame libpng longjmps to.)
struct PngWriter {
  std::FILE* f;
  png_structp png;
  png_infop info;
  explicit PngWriter(const std::string& path)
      : f(std::fopen(path.c_str(), "wb")),
        png(png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr)),
        info(png ? png_create_info_struct(png) : nullptr) {
    if (!f || !png || !info) throw std::runtime_error("cannot create " + path);
  }
  PngWriter(const PngWriter&) = delete;
  PngWriter& operator=(const PngWriter&) = delete;
  ~PngWriter() {
    png_destroy_write_struct(&png, &info);
    if (f) std::fclose(f);
  }
};

inline void write_png_file(const std::string& path, const TestImage& im) {
  PngWriter w(path);
  png_structp png = w.png;
  png_infop info = w.info;
  if (setjmp(png_jmpbuf(png))) throw std::runtime_error("libpng failed on " + path);
  png_init_io(png, w.f);
  const int type = im.channels == 1   ? PNG_COLOR_TYPE_GRAY
                   : im.channels == 3 ? PNG_COLOR_TYPE_RGB
                                      : PNG_COLOR_TYPE_RGBA;
  png_set_IHDR(png, info, im.width, im.height, im.depth, type, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const size_t row_values = size_t(im.width) * im.channels, bytes = size_t(im.depth / 8);
  std::vector<uint8_t> row(row_values * bytes);
  for (int y = 0; y < im.height; ++y) {
    for (size_t i = 0; i < row_values; ++i) {
      const uint16_t v = im.pixels[size_t(y) * row_values + i];
      if (bytes == 1) row[i] = uint8_t(v);
      if (bytes == 2) row[2 * i] = uint8_t(v >> 8), row[2 * i + 1] = uint8_t(v);  // big-endian
    }
    png_write_row(png, row.data());
  }
  png_write_end(png, nullptr);
}

// Packed PNG samples written from one byte each (png_set_packing): a palette image (indices
// into `palette`, RGB triples) or grey of 1, 2 or 4 bits.
inline void write_png_packed(const std::string& path, int width, int height, int depth,
                             const std::vector<uint8_t>& values,
                             const std::vector<png_color>& palette) {
  PngWriter w(path);
  png_structp png = w.png;
  png_infop info = w.info;
  if (setjmp(png_jmpbuf(png))) throw std::runtime_error("libpng failed on " + path);
  png_init_io(png, w.f);
  png_set_IHDR(png, info, png_uint_32(width), png_uint_32(height), depth,
               palette.empty() ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), int(palette.size()));
  png_write_info(png, info);
  png_set_packing(png);
  std::vector<uint8_t> row(static_cast<size_t>(width));
  for (int y = 0; y < height; ++y) {
    std::copy(values.begin() + y * width, values.begin() + (y + 1) * width, row.begin());
    png_write_row(png, row.data());
  }
  png_write_end(png, nullptr);
}

// A grey 8-bit TIFF in 16 x 16 tiles: libtiff's RGBA reader, not the scanline path.
inline void write_tiled_tiff(const std::string& path, int width, int height,
                             const std::vector<uint8_t>& grey) {
  TIFF* t = TIFFOpen(path.c_str(), "w");
  if (!t) throw std::runtime_error("cannot create " + path);
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, uint32_t(width));
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, uint32_t(height));
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, uint16_t(1));
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, uint16_t(8));
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, uint16_t(PHOTOMETRIC_MINISBLACK));
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_TILEWIDTH, uint32_t(16));
  TIFFSetField(t, TIFFTAG_TILELENGTH, uint32_t(16));
  std::vector<uint8_t> tile(16 * 16);
  for (int ty = 0; ty < height; ty += 16)
    for (int tx = 0; tx < width; tx += 16) {
      for (int y = 0; y < 16; ++y)
        for (int x = 0; x < 16; ++x)
          tile[size_t(y * 16 + x)] =
              ty + y < height && tx + x < width ? grey[size_t((ty + y) * width + tx + x)] : 0;
      if (TIFFWriteTile(t, tile.data(), uint32_t(tx), uint32_t(ty), 0, 0) < 0)
        throw std::runtime_error("tiff tile " + path);
    }
  TIFFClose(t);
}

inline void write_jpeg_file(const std::string& path, const TestImage& im, int quality) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + path);
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = JDIMENSION(im.width);
  c.image_height = JDIMENSION(im.height);
  c.input_components = im.channels;
  c.in_color_space = im.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(size_t(im.width) * im.channels);
  for (int y = 0; y < im.height; ++y) {
    for (size_t i = 0; i < row.size(); ++i) row[i] = uint8_t(im.pixels[y * row.size() + i]);
    JSAMPROW p = row.data();
    jpeg_write_scanlines(&c, &p, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

// photometric: PHOTOMETRIC_MINISBLACK, PHOTOMETRIC_MINISWHITE or PHOTOMETRIC_RGB; the samples
// are stored as given.
inline void write_tiff_file(const std::string& path, const TestImage& im, int photometric) {
  TIFF* t = TIFFOpen(path.c_str(), "w");
  if (!t) throw std::runtime_error("cannot create " + path);
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, uint32_t(im.width));
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, uint32_t(im.height));
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, uint16_t(im.channels));
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, uint16_t(im.depth));
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, uint16_t(photometric));
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_LZW);
  const size_t row_values = size_t(im.width) * im.channels;
  std::vector<uint8_t> row8(row_values);
  std::vector<uint16_t> row16(row_values);
  for (int y = 0; y < im.height; ++y) {
    for (size_t i = 0; i < row_values; ++i) {
      row8[i] = uint8_t(im.pixels[y * row_values + i]);
      row16[i] = im.pixels[y * row_values + i];
    }
    void* data = im.depth == 8 ? static_cast<void*>(row8.data()) : row16.data();
    if (TIFFWriteScanline(t, data, uint32_t(y), 0) < 0) throw std::runtime_error("tiff " + path);
  }
  TIFFClose(t);
}

// A decompression bomb's header: a valid PNG signature and IHDR declaring width x height 8-bit
// grey pixels, then one tiny IDAT and IEND (libpng computes the CRCs). A few hundred bytes on
// disk; a decoder that believes the header allocates width x height bytes before the IDAT
// shows that the data is missing.
inline void write_png_header_only(const std::string& path, uint32_t width, uint32_t height) {
  PngWriter w(path);
  if (setjmp(png_jmpbuf(w.png))) throw std::runtime_error("libpng failed on " + path);
  png_init_io(w.png, w.f);
  png_set_IHDR(w.png, w.info, width, height, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(w.png, w.info);
  const png_byte idat[] = {'I', 'D', 'A', 'T', 0}, iend[] = {'I', 'E', 'N', 'D', 0};
  const png_byte zlib_of_one_zero[] = {0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01};
  png_write_chunk(w.png, idat, zlib_of_one_zero, sizeof zlib_of_one_zero);
  png_write_chunk(w.png, iend, nullptr, 0);
}

// A TIFF whose tags say width x height grey 8-bit pixels in one strip that is not there.
inline void write_tiff_header_only(const std::string& path, uint32_t width, uint32_t height) {
  TIFF* t = TIFFOpen(path.c_str(), "w");
  if (!t) throw std::runtime_error("cannot create " + path);
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, width);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, height);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, uint16_t(1));
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, uint16_t(8));
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, uint16_t(PHOTOMETRIC_MINISBLACK));
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, height);
  const uint8_t one_row_start = 0;
  if (TIFFWriteRawStrip(t, 0, const_cast<uint8_t*>(&one_row_start), 1) < 0)
    throw std::runtime_error("tiff strip " + path);
  TIFFClose(t);
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot create " + path);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

inline std::string read_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string bytes;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
  std::fclose(f);
  return bytes;
}

// A JPEG whose start-of-frame says width x height (at most 65535 each) although its data is
// that of a 16 x 16 image: the real file with the SOF0 marker's size bytes overwritten.
inline void write_jpeg_header_claiming(const std::string& path, uint16_t width, uint16_t height) {
  TestImage small{16, 16, 1, 8, std::vector<uint16_t>(256, 128)};
  write_jpeg_file(path, small, 90);
  std::string bytes = read_bytes(path);
  const size_t sof = bytes.find("\xff\xc0");  // baseline SOF0: length(2) precision(1) H(2) W(2)
  if (sof == std::string::npos) throw std::runtime_error("no SOF0 in " + path);
  bytes[sof + 5] = char(height >> 8), bytes[sof + 6] = char(height & 0xff);
  bytes[sof + 7] = char(width >> 8), bytes[sof + 8] = char(width & 0xff);
  write_bytes(path, bytes);
}

}  // namespace rt_test
