// sampler.cpp — the deterministic generator, the per-epoch permutation and the rank slices.
#include "ringtrain/data/sampler.hpp"

#include "ringtrain/core/error.hpp"

namespace ringtrain::data {
namespace {

// Four words of splitmix64 from seed.
Xoshiro256 seed_words(uint64_t seed) {
  uint64_t words[4];
  for (uint64_t& word : words) word = splitmix64(seed);
  return Xoshiro256(words);
}

}  // namespace

Rng::Rng(uint64_t seed) : bits_(seed_words(seed)) {}

uint64_t Rng::below(uint64_t bound) {
  RT_CHECK(bound > 0, "Rng::below(0)");
  unsigned __int128 m = (unsigned __int128)next() * bound;
  uint64_t low = uint64_t(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = (unsigned __int128)next() * bound;
      low = uint64_t(m);
    }
  }
  return uint64_t(m >> 64);
}

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t state = a;
  uint64_t h = splitmix64(state);
  for (uint64_t v : {b, c, d}) {
    state = h ^ v;
    h = splitmix64(state);
  }
  return h;
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.below(uint64_t(i) + 1)]);
  return order;
}

Remainder parse_remainder(const std::string& name) {
  if (name == "drop") return Remainder::kDrop;
  if (name == "pad") return Remainder::kPad;
  if (name == "all") return Remainder::kAll;
  throw InputError(str("remainder '", name, "': use drop or pad (training) or all (evaluation)"));
}

const char* remainder_name(Remainder remainder) {
  switch (remainder) {
    case Remainder::kDrop:
      return "drop";
    case Remainder::kPad:
      return "pad";
    case Remainder::kAll:
      return "all";
  }
  return "?";
}

Sampler::Sampler(int64_t samples, int batch_per_rank, int world_size, Remainder remainder,
                 bool shuffle, uint64_t seed, int group_steps)
    : samples_(samples),
      batch_(batch_per_rank),
      world_size_(world_size),
      group_(group_steps),
      remainder_(remainder),
      shuffle_(shuffle),
      seed_(seed) {
  RT_REQUIRE_INPUT(samples > 0, "the split holds no samples");
  RT_REQUIRE_INPUT(batch_per_rank > 0, "batch per rank ", batch_per_rank, ": must be positive");
  RT_CHECK(world_size > 0, "world size ", world_size);
  RT_REQUIRE_INPUT(group_steps >= 1, "train.accumulate_steps = ", group_steps,
                   ": must be an integer >= 1");
  const int64_t global = int64_t(batch_) * world_size_;
  RT_REQUIRE_INPUT(remainder != Remainder::kDrop || samples >= global, "the split holds ", samples,
                   " samples, fewer than one global batch of ", global, " (", world_size_,
                   " ranks x ", batch_, "); lower the batch or use remainder pad");
  RT_REQUIRE_INPUT(remainder != Remainder::kDrop || samples >= global * group_, "the split holds ",
                   samples, " samples, fewer than one optimizer step of ", global * group_, " (",
                   group_, " accumulated steps x ", world_size_, " ranks x ", batch_,
                   "); lower the batch or train.accumulate_steps, or use remainder pad");
}

void Sampler::check_rank(int rank) const {
  RT_CHECK(rank >= 0 && rank < world_size_, "rank ", rank, " outside world of ", world_size_);
}

int64_t Sampler::rank_samples(int rank) const {
  check_rank(rank);
  if (remainder_ == Remainder::kAll)
    return samples_ * (rank + 1) / world_size_ - samples_ * rank / world_size_;
  return steps_per_epoch(rank) * batch_;
}

int64_t Sampler::steps_per_epoch(int rank) const {
  check_rank(rank);
  const int64_t group = int64_t(batch_) * world_size_ * group_;
  switch (remainder_) {
    case Remainder::kDrop:
      return samples_ / group * group_;
    case Remainder::kPad:
      return (samples_ + group - 1) / group * group_;
    case Remainder::kAll:
      return (rank_samples(rank) + batch_ - 1) / batch_;
  }
  return 0;
}

int64_t Sampler::unseen_per_epoch() const {
  return remainder_ == Remainder::kDrop ? samples_ - steps_per_epoch(0) * batch_ * world_size_ : 0;
}

int64_t Sampler::duplicates_per_epoch() const {
  return remainder_ == Remainder::kPad ? steps_per_epoch(0) * batch_ * world_size_ - samples_ : 0;
}

std::vector<int64_t> Sampler::epoch_order(int epoch) const {
  if (shuffle_) return permutation(samples_, mix_seed(seed_, uint64_t(epoch), 0x5348554646ull));
  std::vector<int64_t> order(samples_);
  for (int64_t i = 0; i < samples_; ++i) order[i] = i;
  return order;
}

std::vector<int64_t> Sampler::step_ids(const std::vector<int64_t>& order, int rank,
                                       int64_t step) const {
  RT_CHECK(int64_t(order.size()) == samples_, "order of ", order.size(), " for ", samples_);
  RT_CHECK(step >= 0 && step < steps_per_epoch(rank), "step ", step, " of ", steps_per_epoch(rank));
  int64_t begin, end;
  if (remainder_ == Remainder::kAll) {
    const int64_t first = samples_ * rank / world_size_;
    begin = first + step * batch_;
    end = std::min(begin + batch_, first + rank_samples(rank));
  } else {
    begin = step * batch_ * world_size_ + int64_t(rank) * batch_;
    end = begin + batch_;
  }
  std::vector<int64_t> ids;
  ids.reserve(end - begin);
  for (int64_t p = begin; p < end; ++p) ids.push_back(order[p % samples_]);  // pad wraps
  return ids;
}

std::vector<int64_t> Sampler::rank_ids(int epoch, int rank) const {
  const std::vector<int64_t> order = epoch_order(epoch);
  std::vector<int64_t> ids;
  for (int64_t s = 0; s < steps_per_epoch(rank); ++s) {
    const auto step = step_ids(order, rank, s);
    ids.insert(ids.end(), step.begin(), step.end());
  }
  return ids;
}

}  // namespace ringtrain::data
