// agreement.hpp — what every rank must hold alike, checked one way: a fingerprint (core/hash.hpp)
// compared with rank 0's, the ranks that differ named one way, and one message form,
// "ranks disagree on WHAT: rank R has A, rank 0 has B". Each caller says only what it compares:
// the deck (train/config_agreement), the fusion plan and its settings (fusion/plan).
//
// defines: kMaxRanksListed, rank_list(), disagreement_line(), ranks_unlike_root(),
//          KeyDifference, first_difference(), disagreement_on_keys()
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// No MPI here: fusion/plan.hpp, which must stay free of it, uses the words below.
namespace ringtrain::comm {

class CommHandle;
class Communicator;

// Messages list at most this many ranks, then "and N more".
constexpr size_t kMaxRanksListed = 8;

// "rank 2", "ranks 1, 3", "ranks 0-3, 7" (a run of three or more as a range), at most
// kMaxRanksListed items and then "and N more": how every message of ours names ranks.
std::string rank_list(const std::vector<int>& ranks);

// "ranks disagree on WHAT: rank R has A, rank 0 has B", R the first of `differing` (ascending,
// not rank 0), then "; RANKS differ(s) from rank 0 too" for the others; an empty value shows
// as "". The caller appends what the user should do.
std::string disagreement_line(const std::string& what, const std::vector<int>& differing,
                              const std::string& theirs, const std::string& root_value);

// Collective over comm: the ranks whose fingerprint is not rank 0's, ascending, the same list on
// every rank (empty: every rank agrees). One allgather of 8 bytes a rank.
std::vector<int> ranks_unlike_root(const CommHandle& comm, uint64_t fingerprint);
std::vector<int> ranks_unlike_root(const Communicator& comm, uint64_t fingerprint);

// The first line where two texts of "key = value" lines differ: its key and both values
// ("(no such key)" for a key one text lacks); key is "" when they hold the same pairs.
struct KeyDifference {
  std::string key, a, b;
};
KeyDifference first_difference(const std::string& a, const std::string& b);

// Collective over comm: every rank's "key = value" lines against rank 0's. "" on every rank
// when they agree; else, on every rank, the disagreement_line of the first key in which the
// lowest differing rank differs, naming the other differing ranks. Rank 0's text travels only
// when the fingerprints differ.
std::string disagreement_on_keys(const CommHandle& comm, const std::string& lines);
std::string disagreement_on_keys(const Communicator& comm, const std::string& lines);

}  // namespace ringtrain::comm
