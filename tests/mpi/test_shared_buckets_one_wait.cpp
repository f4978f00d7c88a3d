// test_shared_buckets_one_wait.cpp — the shared buckets' one-wait path for small calls (every
// rank sums the whole vector from staging slots): the probed limit agrees across ranks, sums are
// exact and bitwise equal across ranks at odd sizes and at each side of the limit, the two
// paths give the same bits, slots are never reused early, and RINGTRAIN_SHM_ONE_WAIT_MAX.
// np: 1 2 3 4 5
// nodes: none
#define BOOST_TEST_MODULE shared_buckets_one_wait
#define OMPI_SKIP_MPICXX 1
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "allreduce_test_data.hpp"
#include "mpi_test.hpp"
#include "ringtrain/comm/shm/shared_buckets.hpp"
#include "ringtrain/core/error.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;
using comm::shm::SharedBuckets;

namespace {

constexpr size_t kRegionBytes = size_t(2) << 20;
constexpr size_t kSlotBytes = size_t(1) << 20;  // the most the one-wait path takes

// RINGTRAIN_SHM_ONE_WAIT_MAX set for one scope on every rank, then unset again.
struct OneWaitSetting {
  explicit OneWaitSetting(const char* value) { setenv("RINGTRAIN_SHM_ONE_WAIT_MAX", value, 1); }
  ~OneWaitSetting() { unsetenv("RINGTRAIN_SHM_ONE_WAIT_MAX"); }
  OneWaitSetting(const OneWaitSetting&) = delete;
  OneWaitSetting& operator=(const OneWaitSetting&) = delete;
};

std::shared_ptr<SharedBuckets> make_buckets() {
  std::string why_not;
  auto buckets = SharedBuckets::try_make(MPI_COMM_WORLD, kRegionBytes, why_not);
  BOOST_TEST_REQUIRE(rt_test::all_ok(buckets != nullptr), why_not);
  return buckets;
}

bool same_on_every_rank(long long value) {
  long long low = value, high = value;
  MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return low == high;
}

// count small integers at data, summed over the ranks: exact, and the same bytes everywhere.
void check_sum(SharedBuckets& buckets, float* data, size_t count, const std::string& what) {
  const std::vector<float> mine = rt_test::small_int_data(rt_test::world_rank(), count);
  std::copy(mine.begin(), mine.end(), data);
  buckets.allreduce(data, count, 1.0f);
  const std::vector<float> got(data, data + count);
  BOOST_TEST(rt_test::all_ok(rt_test::first_wrong_small_int_sum(got, rt_test::world_size()) < 0),
             what);
  BOOST_TEST(rt_test::identical_on_every_rank(got), what);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(shared_buckets_one_wait)

// The limit is measured (no setting): a power of two from 4 KiB, or 0, at most the slots'
// size, and the same on every rank (each decides from the same slowest-rank times).
BOOST_AUTO_TEST_CASE(the_probed_limit_is_the_same_on_every_rank) {
  unsetenv("RINGTRAIN_SHM_ONE_WAIT_MAX");
  auto buckets = make_buckets();
  const size_t limit = buckets->one_wait_max_bytes();
  BOOST_TEST(same_on_every_rank((long long)limit));
  BOOST_TEST(limit <= kSlotBytes);
  BOOST_TEST((limit == 0 || (limit >= 4096 && (limit & (limit - 1)) == 0)), limit);
  // The probe's calls leave the region as it was: zero.
  const float* mine = buckets->mine();
  BOOST_TEST(
      std::all_of(mine, mine + kRegionBytes / sizeof(float), [](float x) { return x == 0; }));
}

// At each limit (none, 64 KiB, all the slots hold): counts at each side of it, at the summing
// block (2048 floats), odd ones, at odd offsets.
BOOST_AUTO_TEST_CASE(exact_and_identical_at_each_side_of_the_limit) {
  OneWaitSetting fixed("0");  // no probe: the limit is set below
  auto buckets = make_buckets();
  const int p = rt_test::world_size();
  for (size_t limit : {size_t(0), size_t(64) << 10, kSlotBytes}) {
    buckets->set_one_wait_max_bytes(limit);
    BOOST_TEST(buckets->one_wait_max_bytes() == limit);
    const size_t at = limit / sizeof(float);
    std::vector<size_t> counts = {1, size_t(p - 1), size_t(p + 1), 2047, 2048, 2049, 7919};
    if (at > 0) counts.insert(counts.end(), {at - 1, at, at + 1});
    size_t offset = 5;
    for (size_t count : counts) {
      if (count == 0) continue;
      if (offset + count > kRegionBytes / sizeof(float)) offset = 5;
      check_sum(*buckets, buckets->mine() + offset, count,
                "limit " + std::to_string(limit) + ", count " + std::to_string(count));
      offset += count + 13;
    }
  }
}

// Mean of noise (rounding matters): the one-wait path and the in-place path give the same bits,
// which are (rank-order sum) / divisor.
BOOST_AUTO_TEST_CASE(both_paths_give_the_same_bits) {
  OneWaitSetting fixed("0");
  auto buckets = make_buckets();
  const int p = rt_test::world_size(), rank = rt_test::world_rank();
  for (size_t count : {size_t(3), size_t(4097), size_t(60001)}) {
    std::vector<std::vector<float>> results;
    for (size_t limit : {size_t(0), kSlotBytes}) {
      buckets->set_one_wait_max_bytes(limit);
      float* data = buckets->mine() + 7;
      for (size_t i = 0; i < count; ++i) data[i] = rt_test::noise(rank, i);
      buckets->allreduce(data, count, float(3 * p));
      results.emplace_back(data, data + count);
    }
    BOOST_TEST(rt_test::all_ok(
                   std::memcmp(results[0].data(), results[1].data(), count * sizeof(float)) == 0),
               "count " << count);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float sum = rt_test::noise(0, i);
      for (int r = 1; r < p; ++r) sum += rt_test::noise(r, i);
      wrong += results[1][i] != sum / float(3 * p);
    }
    BOOST_TEST(rt_test::all_ok(wrong == 0), wrong << " of " << count << " differ");
    BOOST_TEST(rt_test::identical_on_every_rank(results[1]));
  }
}

// Calls alternate across the limit and between two buckets, and each bucket is overwritten the
// moment its call returns: a slot written again before a lagging peer read it, or a path that
// let a rank leave early, shows as a wrong sum.
BOOST_AUTO_TEST_CASE(slots_and_buckets_are_never_reused_early) {
  OneWaitSetting fixed("16384");
  auto buckets = make_buckets();
  BOOST_TEST(buckets->one_wait_max_bytes() == 16384u);
  const int p = rt_test::world_size(), rank = rt_test::world_rank();
  float* bucket[2] = {buckets->mine(), buckets->mine() + 65536 + 3};
  int64_t wrong = 0;
  for (int call = 0; call < 300; ++call) {
    const size_t count = call % 3 == 0 ? 4096 : call % 3 == 1 ? 4097 : 1 + size_t(call) * 37;
    float* data = bucket[call % 2];
    for (size_t i = 0; i < count; ++i) data[i] = float((rank + 1) * (call + 1) + int(i % 5));
    buckets->allreduce(data, count, 1.0f);
    for (size_t i = 0; i < count; ++i)
      wrong += data[i] != float((call + 1) * p * (p + 1) / 2 + p * int(i % 5));
    std::fill(data, data + count, -1e30f);
  }
  BOOST_TEST(rt_test::all_ok(wrong == 0), wrong << " wrong elements");
  // Three stages a call on either path (the stall watch counts them as progress).
  BOOST_TEST(buckets->stages_done() == 3u * 300u);
}

BOOST_AUTO_TEST_CASE(the_setting_fixes_the_limit_and_a_bad_one_fails_everywhere) {
  {
    OneWaitSetting setting("8192");
    BOOST_TEST(make_buckets()->one_wait_max_bytes() == 8192u);
  }
  {
    OneWaitSetting setting("1073741824");  // more than the slots hold
    BOOST_TEST(make_buckets()->one_wait_max_bytes() == kSlotBytes);
  }
  OneWaitSetting setting("lots");
  std::string why_not, message;
  try {
    SharedBuckets::try_make(MPI_COMM_WORLD, kRegionBytes, why_not);
  } catch (const InputError& e) {
    message = e.what();
  }
  BOOST_TEST(rt_test::all_ok(message.find("RINGTRAIN_SHM_ONE_WAIT_MAX=") != std::string::npos),
             message);
}

BOOST_AUTO_TEST_SUITE_END()
