// png_folder.hpp — rt-fibergen's --png-dir: every image as an 8-bit grey PNG in torchvision's
// ImageFolder layout, DIR/<split>/<class>/<index>.png, and DIR/<split>/labels.csv.
//
// defines: write_grey_png(), PngFolder
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/fiber/render.hpp"

namespace ringtrain::fiber {

// Writes size x size 8-bit grey pixels (row-major) as a PNG; Error naming path on failure.
void write_grey_png(const std::string& path, const uint8_t* pixels, int size);

// One split's folder. labels.csv has the header `path,label,multi_hot,pass,zone_pass` (what
// `rt-shard images --labels` reads) and a row per image, in index order; it is written to a
// temp file and put in place by finish() (core/atomic_file.hpp), so a labels.csv is always
// complete.
class PngFolder {
 public:
  PngFolder(const std::string& dir, const std::string& split);
  PngFolder(const PngFolder&) = delete;
  PngFolder& operator=(const PngFolder&) = delete;
  // Destroyed without finish(): the temp CSV is removed (AtomicWrite).
  // Image `index` of the split: <class>/<index:06>.png and its CSV row.
  void add(int64_t index, const Sample& sample, int size);
  void finish();

 private:
  std::string dir_;
  AtomicWrite csv_;
  std::ofstream rows_;
};

}  // namespace ringtrain::fiber
