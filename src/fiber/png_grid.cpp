// png_grid.cpp — the contact sheet: tiles upscaled by pixel replication, captions in a 3x5
// bitmap font, written with libpng.
#include "ringtrain/fiber/png_grid.hpp"

#include <png.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/error.hpp"

namespace ringtrain::fiber {
namespace {

using Rgb = std::array<uint8_t, 3>;

// 3x5 glyphs, one 3-bit row each (bit 2 = left column).
struct Glyph {
  char c;
  uint8_t rows[5];
};
constexpr Glyph kFont[] = {
    {'A', {2, 5, 7, 5, 5}}, {'B', {6, 5, 6, 5, 6}}, {'C', {3, 4, 4, 4, 3}}, {'D', {6, 5, 5, 5, 6}},
    {'E', {7, 4, 6, 4, 7}}, {'F', {7, 4, 6, 4, 4}}, {'G', {3, 4, 5, 5, 3}}, {'H', {5, 5, 7, 5, 5}},
    {'I', {7, 2, 2, 2, 7}}, {'J', {1, 1, 1, 5, 2}}, {'K', {5, 5, 6, 5, 5}}, {'L', {4, 4, 4, 4, 7}},
    {'M', {5, 7, 7, 5, 5}}, {'N', {6, 5, 5, 5, 5}}, {'O', {2, 5, 5, 5, 2}}, {'P', {6, 5, 6, 4, 4}},
    {'Q', {2, 5, 5, 6, 3}}, {'R', {6, 5, 6, 5, 5}}, {'S', {3, 4, 2, 1, 6}}, {'T', {7, 2, 2, 2, 2}},
    {'U', {5, 5, 5, 5, 7}}, {'V', {5, 5, 5, 5, 2}}, {'W', {5, 5, 7, 7, 5}}, {'X', {5, 5, 2, 5, 5}},
    {'Y', {5, 5, 2, 2, 2}}, {'Z', {7, 1, 2, 4, 7}}, {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}},
    {'2', {6, 1, 2, 4, 7}}, {'3', {6, 1, 2, 1, 6}}, {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 6, 1, 6}},
    {'6', {3, 4, 7, 5, 7}}, {'7', {7, 1, 1, 2, 2}}, {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 6}},
    {'-', {0, 0, 7, 0, 0}}, {'_', {0, 0, 0, 0, 7}}, {'/', {1, 1, 2, 4, 4}},
};

const Glyph* glyph(char c) {
  c = char(std::toupper(static_cast<unsigned char>(c)));
  for (const Glyph& g : kFont)
    if (g.c == c) return &g;
  return nullptr;
}

constexpr Rgb kClassColour[kClasses] = {
    {90, 200, 90}, {80, 150, 255}, {230, 200, 60}, {240, 130, 40}, {230, 60, 200}};
constexpr Rgb kPassColour{40, 190, 40}, kFailColour{220, 40, 40};
constexpr int kFontScale = 2, kLine = 7 * kFontScale, kCaption = 2 * kLine + 2;

class Sheet {
 public:
  Sheet(int width, int height) : w_(width), h_(height), rgb_(size_t(width) * height * 3, 24) {}
  void set(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
    std::memcpy(&rgb_[(size_t(y) * w_ + x) * 3], c.data(), 3);
  }
  void fill(int x0, int y0, int w, int h, Rgb c) {
    for (int y = y0; y < y0 + h; ++y)
      for (int x = x0; x < x0 + w; ++x) set(x, y, c);
  }
  // Returns the x after the text.
  int text(int x, int y, const std::string& s, Rgb c) {
    for (char ch : s) {
      if (const Glyph* g = glyph(ch))
        for (int r = 0; r < 5; ++r)
          for (int b = 0; b < 3; ++b)
            if (g->rows[r] & (4 >> b))
              fill(x + b * kFontScale, y + r * kFontScale, kFontScale, kFontScale, c);
      x += 4 * kFontScale;
    }
    return x;
  }
  const uint8_t* row(int y) const { return &rgb_[size_t(y) * w_ * 3]; }
  int width() const { return w_; }
  int height() const { return h_; }

 private:
  int w_, h_;
  std::vector<uint8_t> rgb_;
};

void draw_tile(Sheet& sheet, const GridTile& t, int x0, int y0, int scale) {
  for (int y = 0; y < t.size * scale; ++y)
    for (int x = 0; x < t.size * scale; ++x) {
      uint8_t v = t.pixels[size_t(y / scale) * t.size + x / scale];
      sheet.set(x0 + x, y0 + y, {v, v, v});
    }
  int cy = y0 + t.size * scale + 2;
  sheet.fill(x0, cy, 3 * kFontScale, 5 * kFontScale, kClassColour[t.label]);
  sheet.text(x0 + 4 * kFontScale, cy, class_names()[t.label], kClassColour[t.label]);
  sheet.text(x0, cy + kLine, fiber_type_name(t.fiber), {170, 170, 170});
  const std::string verdict = t.pass ? "PASS" : "FAIL";
  sheet.text(x0 + t.size * scale - 4 * kFontScale * 4, cy, verdict,
             t.pass ? kPassColour : kFailColour);
}

// Owns the libpng write state and the FILE.
struct PngWriter {
  FILE* file = nullptr;
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriter() {
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
    if (file) std::fclose(file);
  }
};

void write_png(const std::string& path, const Sheet& sheet) {
  PngWriter w;
  w.file = std::fopen(path.c_str(), "wb");
  if (!w.file) throw Error(str("png grid ", path, ": cannot create (", std::strerror(errno), ")"));
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (w.png) w.info = png_create_info_struct(w.png);
  if (!w.png || !w.info) throw Error(str("png grid ", path, ": libpng could not start"));
  if (setjmp(png_jmpbuf(w.png))) throw Error(str("png grid ", path, ": libpng write failed"));
  png_init_io(w.png, w.file);
  png_set_IHDR(w.png, w.info, sheet.width(), sheet.height(), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(w.png, w.info);
  for (int y = 0; y < sheet.height(); ++y)
    png_write_row(w.png, const_cast<png_bytep>(sheet.row(y)));
  png_write_end(w.png, nullptr);
  if (std::fflush(w.file) != 0 || std::ferror(w.file))
    throw Error(str("png grid ", path, ": write failed (disk full?)"));
}

}  // namespace

void write_png_grid(const std::string& path, const std::vector<GridTile>& tiles, int columns) {
  RT_CHECK(!tiles.empty() && columns > 0, "png grid ", path, ": nothing to draw");
  const int size = tiles[0].size;
  const int scale = size <= 64 ? 3 : size <= 128 ? 2 : 1;
  const int gap = 6, cell_w = size * scale + gap, cell_h = size * scale + kCaption + gap;
  const int rows = (int(tiles.size()) + columns - 1) / columns;
  Sheet sheet(gap + columns * cell_w, gap + rows * cell_h);
  for (size_t i = 0; i < tiles.size(); ++i) {
    RT_CHECK(tiles[i].size == size && tiles[i].pixels.size() == size_t(size) * size, "png grid ",
             path, ": tile ", i, " has the wrong size");
    draw_tile(sheet, tiles[i], gap + int(i % columns) * cell_w, gap + int(i / columns) * cell_h,
              scale);
  }
  AtomicWrite out(path);
  write_png(out.temp_path(), sheet);
  out.commit();
}

}  // namespace ringtrain::fiber
