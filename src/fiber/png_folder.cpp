// png_folder.cpp — rt-fibergen's --png-dir: grey PNGs per split and class, and labels.csv.
#include "ringtrain/fiber/png_folder.hpp"

#include <png.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ringtrain/core/error.hpp"

namespace ringtrain::fiber {
namespace fs = std::filesystem;

namespace {

// Owns the libpng write state and the FILE.
struct PngFile {
  std::FILE* file = nullptr;
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngFile() {
    if (png) png_destroy_write_struct(&png, info ? &info : nullptr);
    if (file) std::fclose(file);
  }
};

// No C++ object lives in this frame: libpng's longjmp skips no destructor.
bool write_rows(PngFile& w, const uint8_t* pixels, int size) {
  if (setjmp(png_jmpbuf(w.png))) return false;
  png_init_io(w.png, w.file);
  png_set_IHDR(w.png, w.info, png_uint_32(size), png_uint_32(size), 8, PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(w.png, w.info);
  for (int y = 0; y < size; ++y)
    png_write_row(w.png, const_cast<png_bytep>(pixels + size_t(y) * size_t(size)));
  png_write_end(w.png, nullptr);
  return true;
}

// "0|1|0|0|1"
template <typename Array>
std::string bit_list(const Array& bits) {
  std::string out;
  for (auto b : bits) out += std::string(out.empty() ? "" : "|") + (b ? "1" : "0");
  return out;
}

}  // namespace

void write_grey_png(const std::string& path, const uint8_t* pixels, int size) {
  PngFile w;
  w.file = std::fopen(path.c_str(), "wb");
  if (!w.file) throw Error(str(path, ": cannot create (", std::strerror(errno), ")"));
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (w.png) w.info = png_create_info_struct(w.png);
  if (!w.png || !w.info) throw Error(str(path, ": libpng could not start"));
  if (!write_rows(w, pixels, size) || std::fflush(w.file) != 0 || std::ferror(w.file))
    throw Error(str(path, ": PNG write failed (disk full?)"));
}

PngFolder::PngFolder(const std::string& dir, const std::string& split)
    : dir_((fs::path(dir) / split).string()), csv_((fs::path(dir_) / "labels.csv").string()) {
  for (const std::string& name : class_names()) fs::create_directories(fs::path(dir_) / name);
  rows_.open(csv_.temp_path());
  if (!rows_) throw Error(str(csv_.temp_path(), ": cannot create (", std::strerror(errno), ")"));
  rows_ << "path,label,multi_hot,pass,zone_pass\n";
}

void PngFolder::add(int64_t index, const Sample& sample, int size) {
  char name[32];
  std::snprintf(name, sizeof name, "%06lld.png", static_cast<long long>(index));
  const std::string& label = class_names()[size_t(sample.label)];
  const std::string relative = label + "/" + name;
  write_grey_png((fs::path(dir_) / relative).string(), sample.pixels.data(), size);
  rows_ << relative << ',' << label << ',' << bit_list(sample.multi_hot) << ',' << int(sample.pass)
        << ',' << bit_list(sample.zone_pass) << '\n';
}

void PngFolder::finish() {
  rows_.close();
  if (!rows_) throw Error(str(csv_.temp_path(), ": write failed (disk full?)"));
  csv_.commit();
}

}  // namespace ringtrain::fiber
