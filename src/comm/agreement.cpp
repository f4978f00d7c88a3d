// agreement.cpp — fingerprints compared with rank 0's, rank lists, the "ranks disagree" line and
// the first differing key of two "key = value" texts.
#include "ringtrain/comm/agreement.hpp"

#include <map>
#include <sstream>
#include <utility>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/hash.hpp"

namespace ringtrain::comm {
namespace {

std::string shown(const std::string& value) {
  return value.empty() ? "\"\"" : value;
}

// "key = value" lines as (key, value), in order.
std::vector<std::pair<std::string, std::string>> key_lines(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) out.emplace_back(line.substr(0, eq), line.substr(eq + 3));
  }
  return out;
}

std::vector<int> unlike_root(MPI_Comm comm, uint64_t fingerprint) {
  int world = 1;
  MPI_CHECK(MPI_Comm_size(comm, &world));
  std::vector<uint64_t> all(size_t(world), 0);
  MPI_CHECK(MPI_Allgather(&fingerprint, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm));
  std::vector<int> differing;
  for (int r = 1; r < world; ++r)
    if (all[size_t(r)] != all[0]) differing.push_back(r);
  return differing;
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> items;
  for (size_t i = 0; i < ranks.size();) {
    size_t run = 1;  // ranks[i], ranks[i] + 1, ...
    while (i + run < ranks.size() && ranks[i + run] == ranks[i] + int(run)) ++run;
    if (run >= 3) {
      items.push_back(str(ranks[i], "-", ranks[i + run - 1]));
      i += run;
    } else {
      items.push_back(std::to_string(ranks[i++]));
    }
  }
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t k = 0; k < items.size() && k < kMaxRanksListed; ++k)
    out += (k ? ", " : "") + items[k];
  if (items.size() > kMaxRanksListed) out += str(" and ", items.size() - kMaxRanksListed, " more");
  return out;
}

std::string disagreement_line(const std::string& what, const std::vector<int>& differing,
                              const std::string& theirs, const std::string& root_value) {
  RT_CHECK(!differing.empty(), "disagreement_line: no rank differs on ", what);
  std::string line = str("ranks disagree on ", what, ": rank ", differing.front(), " has ",
                         shown(theirs), ", rank 0 has ", shown(root_value));
  if (differing.size() > 1)
    line += str("; ", rank_list({differing.begin() + 1, differing.end()}),
                differing.size() > 2 ? " differ" : " differs", " from rank 0 too");
  return line;
}

std::vector<int> ranks_unlike_root(const CommHandle& comm, uint64_t fingerprint) {
  return unlike_root(comm.get(), fingerprint);
}

std::vector<int> ranks_unlike_root(const Communicator& comm, uint64_t fingerprint) {
  return unlike_root(comm.raw(), fingerprint);
}

KeyDifference first_difference(const std::string& a, const std::string& b) {
  const auto in_a = key_lines(a), in_b = key_lines(b);
  const std::map<std::string, std::string> b_of(in_b.begin(), in_b.end());
  const std::map<std::string, std::string> a_of(in_a.begin(), in_a.end());
  const std::string absent = "(no such key)";
  for (const auto& [key, value] : in_a) {
    auto other = b_of.find(key);
    if (other == b_of.end()) return {key, value, absent};
    if (other->second != value) return {key, value, other->second};
  }
  for (const auto& [key, value] : in_b)
    if (!a_of.count(key)) return {key, absent, value};
  return {};
}

namespace {

std::string keys_disagreement(MPI_Comm comm, const std::string& lines) {
  const std::vector<int> differing = unlike_root(comm, fnv1a(lines));
  if (differing.empty()) return "";
  int me = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &me));
  std::string root_lines = me == 0 ? lines : std::string();
  broadcast_bytes(comm, root_lines, 0);
  std::string line;
  if (me == differing.front()) {
    KeyDifference d = first_difference(lines, root_lines);
    if (d.key.empty()) d = {"the order of the lines", "another order", "this order"};  // same pairs
    line = disagreement_line(d.key, differing, d.a, d.b);
  }
  broadcast_bytes(comm, line, differing.front());
  return line;
}

}  // namespace

std::string disagreement_on_keys(const CommHandle& comm, const std::string& lines) {
  return keys_disagreement(comm.get(), lines);
}

std::string disagreement_on_keys(const Communicator& comm, const std::string& lines) {
  return keys_disagreement(comm.raw(), lines);
}

}  // namespace ringtrain::comm
