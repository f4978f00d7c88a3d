// names.cpp — rank lists and numbers as the fusion engine's messages print them.
#include "names.hpp"

#include <cstdio>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm::fusion {

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kMaxNamesListed; ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > kMaxNamesListed) out += str(" and ", ranks.size() - kMaxNamesListed, " more");
  return out;
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace ringtrain::comm::fusion
