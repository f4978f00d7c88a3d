// two_rank_reducer.hpp — two "ranks" as threads for synchronized batch norm tests: a
// StatReducer per rank that sums each call's values across both, like an allreduce; running the
// two; each one's half of a batch.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "ringtrain/backend/backend.hpp"

namespace rt_test {

// Two "ranks" as threads: the reducer sums each call's values across both, like an
// allreduce, with a barrier so that every call meets its partner.
class TwoRankReducer {
 public:
  ringtrain::backend::StatReducer for_rank(int r) {
    return [this, r](float* v, size_t n) { reduce(r, v, n); };
  }

 private:
  void reduce(int r, float* v, size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    slot_[r].assign(v, v + n);
    ++arrived_;
    int gen = generation_;
    if (arrived_ == 2) {
      sum_.assign(n, 0.0f);
      for (size_t i = 0; i < n; ++i) sum_[i] = slot_[0][i] + slot_[1][i];
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
    std::copy(sum_.begin(), sum_.end(), v);
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<float> slot_[2], sum_;
  int arrived_ = 0, generation_ = 0;
};

// Runs rank(0) and rank(1) on two threads, the reducer's partners, and waits for both.
template <typename F>
void run_two_ranks(F&& rank) {
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
}

// Rank r's half of a batch's values (rank 0 the first half).
inline std::vector<float> half_of(const std::vector<float>& values, int r) {
  const size_t n = values.size() / 2;
  return std::vector<float>(values.begin() + r * n, values.begin() + (r + 1) * n);
}

}  // namespace rt_test
