// rt-fibergen.cpp — renders synthetic fiber end-face images into HDF5 shards (see FIBER.md).
#include <iostream>

#include "ringtrain/core/stop_signals.hpp"
#include "ringtrain/fiber/generator.hpp"

int main(int argc, char** argv) {
  // Before the render threads start, so that they inherit the blocked mask: SIGTERM and SIGINT
  // become a flag the generator polls between blocks, and its temp files are removed.
  ringtrain::StopSignals stop_signals;
  return ringtrain::fiber::run_fibergen(argc, argv, std::cout, std::cerr);
}
