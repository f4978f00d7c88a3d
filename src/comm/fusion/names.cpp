// names.cpp — numbers as the fusion engine's messages print them.
#include "names.hpp"

#include <cstdio>

namespace ringtrain::comm::fusion {

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace ringtrain::comm::fusion
