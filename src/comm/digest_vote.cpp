// digest_vote.cpp — the majority over the ranks' model digests, and the first tensor that differs.
#include "ringtrain/comm/digest_vote.hpp"

#include <map>

#include "ringtrain/core/error.hpp"

namespace ringtrain::comm {

DigestVote tally_digests(const std::vector<uint64_t>& digests) {
  RT_CHECK(!digests.empty(), "tally_digests: no ranks");
  DigestVote vote;
  vote.digests = digests;
  std::map<uint64_t, int> count;
  for (uint64_t d : digests) ++count[d];
  // Ranks in order: the first rank of a group that beats every earlier group's count wins ties
  // for the group of the lower rank.
  int best = 0;
  for (size_t r = 0; r < digests.size(); ++r)
    if (count[digests[r]] > best) {
      best = count[digests[r]];
      vote.reference = int(r);
    }
  vote.agreed = best == int(digests.size());
  vote.majority = 2 * best > int(digests.size());
  for (size_t r = 0; r < digests.size(); ++r)
    (digests[r] == digests[size_t(vote.reference)] ? vote.same : vote.differing).push_back(int(r));
  return vote;
}

DigestVote vote_on_digest(const Communicator& comm, uint64_t mine) {
  return tally_digests(comm.allgather({mine}));
}

size_t first_differing_tensor(const std::vector<uint64_t>& all, size_t per_rank,
                              const DigestVote& vote) {
  RT_CHECK(all.size() == per_rank * vote.digests.size(), "first_differing_tensor: ", all.size(),
           " digests for ", vote.digests.size(), " ranks x ", per_rank);
  const uint64_t* reference = all.data() + per_rank * size_t(vote.reference);
  for (size_t i = 0; i < per_rank; ++i)
    for (int r : vote.differing)
      if (all[per_rank * size_t(r) + i] != reference[i]) return i;
  return per_rank;
}

}  // namespace ringtrain::comm
