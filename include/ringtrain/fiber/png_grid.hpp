// png_grid.hpp — a contact sheet of end-face images with their class and verdict, as a PNG.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/fiber/acceptance.hpp"

namespace ringtrain::fiber {

struct GridTile {
  std::vector<uint8_t> pixels;  // size * size grayscale
  int size = 0;
  int32_t label = kClean;
  bool pass = true;
  FiberType fiber = FiberType::kSmUpc;
};

// Writes the tiles `columns` to a row, each upscaled (x3 at 64, x2 at 128) over a caption:
// the class colour and name, the fiber type and PASS (green) or FAIL (red). Atomic: a temp file
// renamed into place.
void write_png_grid(const std::string& path, const std::vector<GridTile>& tiles, int columns);

}  // namespace ringtrain::fiber
