// test_loader_slices.cpp — under mpirun, the ranks' loaders read disjoint slices of a split.
//
// The union is the whole split (but the declared remainder); every image matches its id.
// np: 2 3 4
// quick: 2
#define BOOST_TEST_MODULE mpi_loader_slices
// OpenMPI's C++ bindings warn under -Wextra; this test uses the C API only.
#define OMPI_SKIP_MPICXX 1
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "mpi_test.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/shard/writer.hpp"

// RT_MPI_TEST_MAIN pastes its qualified fixture name into an identifier (gf_rt_test::...),
// which does not compile; the same global fixture, named without the namespace:
using rt_test::MpiFixture;
BOOST_TEST_GLOBAL_FIXTURE(MpiFixture);

namespace fs = std::filesystem;
using namespace ringtrain;
using data::Remainder;

namespace {

constexpr int kSamples = 1003, kSide = 4, kClasses = 10;

// Pixels 0 and 1 hold the id (little-endian), the rest a mix of id and position.
uint8_t pixel(int64_t id, int k) {
  if (k == 0) return uint8_t(id & 0xff);
  if (k == 1) return uint8_t(id >> 8);
  return uint8_t((id * 7 + k * 13) % 256);
}

// Rank 0 writes a 3-shard split with mean 0 and std 1, so a float is pixel/255.
std::string shared_split() {
  int tag = rt_test::world_rank() == 0 ? int(getpid()) : 0;
  MPI_Bcast(&tag, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const fs::path dir = fs::temp_directory_path() / ("rt-mpi-slices-" + std::to_string(tag));
  if (rt_test::world_rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    data::shard::SplitImages s;
    s.dataset = "testset";
    s.split = "train";
    s.channels = 1;
    s.height = s.width = kSide;
    for (int c = 0; c < kClasses; ++c) s.class_names.push_back("class" + std::to_string(c));
    s.mean = {0.f};
    s.std = {1.f};
    for (int64_t id = 0; id < kSamples; ++id) {
      for (int k = 0; k < kSide * kSide; ++k) s.images.push_back(pixel(id, k));
      s.labels.push_back(int32_t(id % kClasses));
    }
    data::shard::write_splits(dir.string(), {&s}, 3);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir.string();
}

struct RankEpoch {
  std::vector<int64_t> ids;
  int64_t steps = 0;
  bool images_match_ids = true;
};

RankEpoch read_epoch(const std::string& dir, Remainder remainder, bool shuffle, int epoch) {
  data::LoaderOptions o;
  o.batch_per_rank = 8;
  o.shuffle = shuffle;
  o.remainder = remainder;
  o.seed = 5;
  o.rank = rt_test::world_rank();
  o.world_size = rt_test::world_size();
  data::Loader loader(data::ShardSet::open(dir, "train"), o);
  loader.start_epoch(epoch);
  RankEpoch out;
  data::Batch b;
  while (loader.next(b)) {
    ++out.steps;
    for (int i = 0; i < b.n; ++i) {
      const int64_t id = b.ids[i];
      out.ids.push_back(id);
      out.images_match_ids = out.images_match_ids && b.labels[i] == id % kClasses;
      for (int k = 0; k < kSide * kSide; ++k)
        out.images_match_ids =
            out.images_match_ids &&
            int(std::lround(b.images[i * kSide * kSide + k] * 255)) == pixel(id, k);
    }
  }
  out.images_match_ids =
      out.images_match_ids && out.ids == loader.sampler().rank_ids(epoch, o.rank);
  return out;
}

// Every rank's ids at rank 0 (empty elsewhere).
std::vector<int64_t> gather_ids(const std::vector<int64_t>& mine) {
  const int world = rt_test::world_size();
  int count = int(mine.size());
  std::vector<int> counts(world), offsets(world, 0);
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int r = 1; r < world; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<int64_t> all(rt_test::world_rank() == 0 ? offsets.back() + counts.back() : 0);
  MPI_Gatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), offsets.data(),
              MPI_INT64_T, 0, MPI_COMM_WORLD);
  return all;
}

bool steps_equal_everywhere(int64_t steps) {
  int64_t low = 0, high = 0;
  MPI_Allreduce(&steps, &low, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&steps, &high, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return low == high;
}

}  // namespace

BOOST_AUTO_TEST_CASE(drop_slices_are_disjoint_and_cover_all_but_the_remainder) {
  const std::string dir = shared_split();
  const int world = rt_test::world_size();
  const int64_t global = 8 * world, unseen = kSamples % global;
  std::vector<int64_t> first_epoch;
  for (int epoch : {0, 1}) {
    const RankEpoch mine = read_epoch(dir, Remainder::kDrop, true, epoch);
    BOOST_TEST(rt_test::all_ok(mine.images_match_ids));
    BOOST_TEST(steps_equal_everywhere(mine.steps));
    const auto all = gather_ids(mine.ids);
    bool ok = true;
    if (rt_test::world_rank() == 0) {
      const std::set<int64_t> distinct(all.begin(), all.end());
      ok = distinct.size() == all.size() && int64_t(all.size()) == kSamples - unseen &&
           *distinct.begin() >= 0 && *distinct.rbegin() < kSamples;
      if (epoch == 0)
        first_epoch = all;
      else
        ok = ok && all != first_epoch;  // a new order each epoch
    }
    BOOST_TEST(rt_test::all_ok(ok), "epoch " << epoch);
  }
  if (rt_test::world_rank() == 0) fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(pad_covers_the_whole_split) {
  const std::string dir = shared_split();
  const int world = rt_test::world_size();
  const int64_t global = 8 * world, steps = (kSamples + global - 1) / global;
  const RankEpoch mine = read_epoch(dir, Remainder::kPad, true, 3);
  BOOST_TEST(rt_test::all_ok(mine.images_match_ids));
  BOOST_TEST(rt_test::all_ok(mine.steps == steps));
  const auto all = gather_ids(mine.ids);
  bool ok = true;
  if (rt_test::world_rank() == 0) {
    const std::set<int64_t> distinct(all.begin(), all.end());
    ok = int64_t(distinct.size()) == kSamples && int64_t(all.size()) == steps * global;
  }
  BOOST_TEST(rt_test::all_ok(ok));
  if (rt_test::world_rank() == 0) fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(evaluation_reads_every_sample_exactly_once) {
  const std::string dir = shared_split();
  const RankEpoch mine = read_epoch(dir, Remainder::kAll, false, 0);
  BOOST_TEST(rt_test::all_ok(mine.images_match_ids));
  const auto all = gather_ids(mine.ids);
  bool ok = true;
  if (rt_test::world_rank() == 0) {
    std::vector<int64_t> expected(kSamples);
    for (int64_t i = 0; i < kSamples; ++i) expected[i] = i;
    ok = all == expected;  // contiguous blocks in rank order
  }
  BOOST_TEST(rt_test::all_ok(ok));
  if (rt_test::world_rank() == 0) fs::remove_all(dir);
}
