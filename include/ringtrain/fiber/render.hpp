// render.hpp — renders one synthetic fiber end-face image with its labels, as a pure function
// of (seed, split, index, options).
//
// defines: kRenderSize, kRenderUmPerPixel, FiberChoice, RenderOptions, Sample, render_sample()
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/fiber/acceptance.hpp"

namespace ringtrain::fiber {

// The microscope's frame: 256 x 256 pixels of 1.1 um (a 282 um field, zone D is 250 um).
constexpr int kRenderSize = 256;
constexpr double kRenderUmPerPixel = 1.1;
// Bump when the images or labels for a given seed change (2: multimode and APC acceptance
// tables as FIBER.md gives them).
constexpr int32_t kGeneratorVersion = 2;

// The fiber type of every image, or a uniform draw per image (kMixed).
enum class FiberChoice { kSmUpc, kSmApc, kMmUpc, kMixed };
const char* fiber_choice_name(FiberChoice choice);  // sm-upc, sm-apc, mm-upc, mixed
// Parses a --fiber-type value; false when it names no choice.
bool parse_fiber_choice(const std::string& text, FiberChoice* out);

struct RenderOptions {
  int size = 64;  // output side: 64, 128 or 256 (area average of the 256 render)
  FiberChoice fiber = FiberChoice::kSmUpc;
  // Tests only: plan every defect (same random stream, same labels) but paint none of them.
  bool skip_defect_painting = false;
};

// One image and its labels.
struct Sample {
  std::vector<uint8_t> pixels;  // size * size, row-major, grayscale
  int32_t label = kClean;       // the most severe class present
  std::array<uint8_t, kClasses> multi_hot{};
  uint8_t pass = 1;
  std::array<uint8_t, kZones> zone_pass{};
  FiberType fiber = FiberType::kSmUpc;
  std::vector<Defect> defects;  // what was drawn, as measured for the acceptance table
};

// Image `index` of split `split` (0 train, 1 val, 2 test) for `seed`. Thread-safe. The bytes
// depend on nothing else (not on shard, thread or rank counts): random draws come from raw
// xoshiro256** outputs. Geometry goes through libm (sin, cos, exp, pow), so a different CPU or
// libm could in principle move a pixel by one grey level; one build always gives the same bytes.
Sample render_sample(uint64_t seed, int split, uint64_t index, const RenderOptions& options);

}  // namespace ringtrain::fiber
