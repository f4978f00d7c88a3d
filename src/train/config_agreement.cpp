// config_agreement.cpp — the start-up agreement: a hash of each rank's effective configuration
// compared in one collective, and on a mismatch the first differing key named by rank 0.
#include "ringtrain/train/config_agreement.hpp"

#include <cstdint>
#include <vector>

#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/io/results.hpp"

namespace ringtrain::train {
namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// "rank 2", "ranks 1, 3".
std::string ranks_text(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string shown(const std::string& value) {
  return value.empty() ? "\"\"" : value;
}

// Some rank could not parse its command line: rank 0 prints the lowest such rank's line, as
// it is when every rank has it, else with the ranks that have it.
int refuse_bad_input(const comm::Communicator& comm, const StartRequest& mine) {
  const std::vector<std::string> lines =
      comm.gather_strings_to_root(mine.kind == StartRequest::kBadInput ? mine.text : "");
  if (comm.rank() != 0) return kExitBadInput;
  size_t first = 0;
  while (lines[first].empty()) ++first;
  std::vector<int> alike;
  for (size_t r = 0; r < lines.size(); ++r)
    if (lines[r] == lines[first]) alike.push_back(int(r));
  log::error_for_ranks(alike.size() == lines.size()
                           ? lines[first]
                           : str(lines[first], " (", ranks_text(alike), ")"));
  return kExitBadInput;
}

// The hashes differ: every rank finds its first key that differs from rank 0's, and rank 0
// names the lowest rank's, with the other ranks that differ.
int refuse_mismatch(const comm::Communicator& comm, const std::string& text) {
  std::vector<uint8_t> root(text.begin(), text.end());
  comm.broadcast(root, 0);
  const KeyDifference d = first_difference(text, std::string(root.begin(), root.end()));
  const std::string mine = d.key.empty() ? "" : d.key + '\0' + d.a + '\0' + d.b;
  const std::vector<std::string> found = comm.gather_strings_to_root(mine);
  if (comm.rank() != 0) return kExitBadInput;
  std::vector<int> differing;
  for (size_t r = 0; r < found.size(); ++r)
    if (!found[r].empty()) differing.push_back(int(r));
  if (differing.empty()) differing.push_back(0);  // a hash collision of equal texts: cannot be
  const std::string& f = found[size_t(differing.front())];
  const size_t at_a = f.find('\0'), at_b = f.find('\0', at_a + 1);
  std::string line =
      str("ranks disagree on ", f.substr(0, at_a), ": rank ", differing.front(), " has ",
          shown(f.substr(at_a + 1, at_b - at_a - 1)), ", rank 0 has ", shown(f.substr(at_b + 1)));
  if (differing.size() > 1)
    line += str("; ", ranks_text({differing.begin() + 1, differing.end()}),
                differing.size() > 2 ? " differ" : " differs", " from rank 0 too");
  log::error_for_ranks(line + " (every rank must read the same deck)");
  return kExitBadInput;
}

}  // namespace

std::string start_text(const StartRequest& request) {
  std::string text =
      str("ringtrain build = ", io::build_identity(), "\n",
          "--help or --print-deck = ", request.kind == StartRequest::kPrint ? "yes" : "no", "\n");
  return request.kind == StartRequest::kTrain ? text + agreed_config_text(request.config) : text;
}

int agree_on_start(const comm::Communicator& comm, const StartRequest& mine) {
  const bool bad = mine.kind == StartRequest::kBadInput;
  const std::string text = bad ? std::string() : start_text(mine);
  const uint64_t hash = fnv1a(text);
  // Any rank failed; the largest hash and the smallest (max of ~hash): equal on every rank.
  uint64_t v[3] = {bad ? 1u : 0u, hash, ~hash};
  comm.allreduce_max(v, 3);
  if (v[0] != 0) return refuse_bad_input(comm, mine);
  if (v[1] != ~v[2]) return refuse_mismatch(comm, text);
  if (mine.kind == StartRequest::kPrint) {
    log::info(mine.text);
    return kExitOk;
  }
  return -1;
}

}  // namespace ringtrain::train
