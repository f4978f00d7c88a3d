// sampler.hpp — which samples each rank sees at each step of an epoch.
//
// A deterministic per-epoch shuffle, disjoint per-rank slices, a declared remainder policy.
//
// Training (drop, pad): the epoch order is a permutation of the split drawn from
// (seed, epoch); step s is the global batch at positions [s*G, (s+1)*G) of it, G = world
// size x batch per rank, and rank r takes positions [s*G + r*b, s*G + (r+1)*b). So N ranks
// x batch b see exactly the samples 1 rank x batch N*b sees, step by step, and every rank
// runs the same number of steps.
//   drop: floor(S / G) steps; the last S mod G samples of this epoch's order are not seen
//         (the order changes every epoch, so over epochs every sample is seen).
//   pad:  ceil(S / G) steps; the last global batch is filled by wrapping around to the
//         start of the order (ceil(S/G)*G - S declared duplicates).
// Evaluation (all): every sample exactly once; rank r takes the contiguous block
//   [r*S/W, (r+1)*S/W) of the order, in batches of b with a shorter last one; ranks may
//   differ by one sample and one step (results are reduced afterwards).
// "partial" (a short last training step) is not offered: ranks would need equal step
// counts but unequal batches, which breaks 1/world gradient averaging and leaves empty
// batches when S mod G < W.
// Gradient accumulation (K micro-steps per optimizer step): drop and pad count whole groups of
// K steps, K*G samples each, so an epoch never ends inside a group: drop leaves out the last
// S mod (K*G) samples, pad wraps to fill the last group. Step s still takes positions
// [s*G, (s+1)*G), so N ranks x K micro-batches of b see what 1 rank x batch N*K*b sees.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/core/random.hpp"

namespace ringtrain::data {

// One step of SplitMix64 (Steele, Lea, Flood 2014): advances state, returns the next value.
using ringtrain::splitmix64;  // core/random.hpp

// xoshiro256** seeded through splitmix64, with its own bounded draw, so that shuffles and
// augmentation are bit-identical on every platform and standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next() { return bits_.next(); }
  // Uniform in [0, bound), bound > 0 (Lemire's multiply-and-reject: no modulo bias).
  uint64_t below(uint64_t bound);

 private:
  Xoshiro256 bits_;
};

// One well-mixed 64-bit value from several (seed, epoch, sample id, purpose ...).
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0);

// A Fisher-Yates permutation of 0..n-1 drawn from seed.
std::vector<int64_t> permutation(int64_t n, uint64_t seed);

enum class Remainder { kDrop, kPad, kAll };
// "drop", "pad", "all"; anything else throws InputError naming the value.
Remainder parse_remainder(const std::string& name);
const char* remainder_name(Remainder remainder);

class Sampler {
 public:
  // Throws InputError when drop leaves no step (fewer samples than one global batch, or one
  // group of group_steps global batches). group_steps: micro-steps per optimizer step.
  Sampler(int64_t samples, int batch_per_rank, int world_size, Remainder remainder, bool shuffle,
          uint64_t seed, int group_steps = 1);

  int64_t samples() const { return samples_; }
  int world_size() const { return world_size_; }
  int batch_per_rank() const { return batch_; }
  Remainder remainder() const { return remainder_; }

  int group_steps() const { return group_; }
  // Steps of one epoch on rank; the same on every rank for drop and pad, where they are a
  // whole number of groups.
  int64_t steps_per_epoch(int rank) const;
  // Samples rank sees per epoch (pad: duplicates included).
  int64_t rank_samples(int rank) const;
  // Samples not seen per epoch (drop) and samples seen twice (pad); 0 otherwise.
  int64_t unseen_per_epoch() const;
  int64_t duplicates_per_epoch() const;

  // The epoch's global order: a permutation from (seed, epoch), or 0..S-1 without shuffle.
  std::vector<int64_t> epoch_order(int epoch) const;
  // The ids rank reads at step of the epoch whose order is given, in batch order.
  std::vector<int64_t> step_ids(const std::vector<int64_t>& order, int rank, int64_t step) const;
  // Every id rank reads in the epoch, step after step.
  std::vector<int64_t> rank_ids(int epoch, int rank) const;

 private:
  void check_rank(int rank) const;
  int64_t samples_;
  int batch_, world_size_;
  int group_;
  Remainder remainder_;
  bool shuffle_;
  uint64_t seed_;
};

}  // namespace ringtrain::data
