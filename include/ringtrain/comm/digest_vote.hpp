// digest_vote.hpp — every rank's digest of its model state (core/digest.hpp) compared in one
// small collective: which ranks hold the majority's, which differ, and where they first differ.
//
// defines: DigestVote, tally_digests(), vote_on_digest(), first_differing_tensor()
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/comm/communicator.hpp"

namespace ringtrain::comm {

struct DigestVote {
  std::vector<uint64_t> digests;  // one per rank
  bool agreed = true;             // every rank holds the same digest
  // More than half the ranks hold the reference's digest: the others can be repaired from it.
  bool majority = true;
  // The lowest rank of the largest group of equal digests (a tie: the group of the lowest rank),
  // so with no majority (2 ranks) rank 0 is the one the others are named against.
  int reference = 0;
  std::vector<int> same;       // ranks holding the reference's digest, ascending
  std::vector<int> differing;  // the others, ascending
};

// The vote over digests[r], one per rank.
DigestVote tally_digests(const std::vector<uint64_t>& digests);

// Collective: one allgather of 8 bytes a rank; the same verdict on every rank.
DigestVote vote_on_digest(const Communicator& comm, uint64_t mine);

// all: every rank's per-tensor digests, rank-major (ranks x per_rank). The first tensor index in
// which a differing rank's digest is not the reference's; per_rank when none is.
size_t first_differing_tensor(const std::vector<uint64_t>& all, size_t per_rank,
                              const DigestVote& vote);

}  // namespace ringtrain::comm
