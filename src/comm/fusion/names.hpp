// names.hpp — how the fusion engine's messages list ranks and print numbers (private to fusion/).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ringtrain::comm::fusion {

// Messages list at most this many tensors, ranks or buckets, then "and N more".
constexpr size_t kMaxNamesListed = 8;

// "rank 1" or "ranks 1, 2, 5" (long lists cut short).
std::string ranks_text(const std::vector<int>& ranks);
// A number as %g prints it: "60", "0.5", "1e+10".
std::string number_text(double value);

}  // namespace ringtrain::comm::fusion
