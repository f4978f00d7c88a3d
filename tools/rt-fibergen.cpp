// rt-fibergen.cpp — renders synthetic fiber end-face images into HDF5 shards (see FIBER.md).
#include <iostream>

#include "ringtrain/fiber/generator.hpp"

int main(int argc, char** argv) {
  return ringtrain::fiber::run_fibergen(argc, argv, std::cout, std::cerr);
}
