// names.hpp — how the fusion engine's messages list names and print numbers (private to fusion/);
// ranks are listed by comm::rank_list (comm/agreement.hpp), as in every message of ours.
#pragma once

#include <cstddef>
#include <string>

namespace ringtrain::comm::fusion {

// Messages list at most this many tensors or buckets, then "and N more".
constexpr size_t kMaxNamesListed = 8;

// A number as %g prints it: "60", "0.5", "1e+10".
std::string number_text(double value);

}  // namespace ringtrain::comm::fusion
