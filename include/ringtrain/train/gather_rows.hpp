// gather_rows.hpp — per-image values of every rank, concatenated in rank order on rank 0.
//
// Communicator::gather_to_root wants the same count from every rank; evaluation and
// prediction slices differ by a remainder, so these carry the bytes as one string per rank.
#pragma once

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::train {

// Collective: every rank's values, rank 0's first; empty on the other ranks.
template <typename T>
std::vector<T> gather_rows_to_root(const comm::Communicator& comm, const std::vector<T>& mine) {
  static_assert(std::is_trivially_copyable_v<T>, "gathered as bytes");
  std::string bytes(mine.size() * sizeof(T), '\0');
  if (!mine.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  std::vector<T> all;
  for (const std::string& rank : comm.gather_strings_to_root(bytes)) {
    const size_t at = all.size();
    all.resize(at + rank.size() / sizeof(T));
    if (!rank.empty()) std::memcpy(all.data() + at, rank.data(), rank.size());
  }
  return all;
}

}  // namespace ringtrain::train
