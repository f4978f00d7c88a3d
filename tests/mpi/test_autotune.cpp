// test_autotune.cpp — the autotune across ranks, with made-up step times (the search takes the
// times as arguments): every rank switches at the same step to rank 0's choice from the
// slowest rank's times, weights stay bitwise identical across the switches, a choice adopted
// from a checkpoint is applied without a search; one rank does not search.
// np: 1 2 3 4
// quick: 2
#define BOOST_TEST_MODULE autotune
#include <map>

#include "fused_replica.hpp"
#include "mpi_test.hpp"
#include "ringtrain/comm/fusion/autotune.hpp"

RT_MPI_TEST_MAIN

using namespace ringtrain;
using comm::fusion::AutotuneOptions;
using comm::fusion::TuneSettings;

namespace {

constexpr int kBatch = 4;
constexpr int kSide = 16;
constexpr int kClasses = 5;

// fibernet through the trainer's DataParallel (fused_replica.hpp), stepped on data that
// differs per rank and per step.
struct Replica : rt_test::FusedReplica {
  explicit Replica(const comm::Communicator& comm) : FusedReplica(comm, spec()) {}

  static rt_test::FusedReplicaSpec spec() {
    rt_test::FusedReplicaSpec spec;
    spec.model = "fibernet";
    spec.seed = 7;
    spec.side = kSide;
    spec.classes = kClasses;
    spec.algorithm = comm::allreduce::Algorithm::automatic;
    spec.stall_timeout_s = 30;
    return spec;
  }

  void step(int step_index, int rank) {
    std::vector<float> images(size_t(kBatch) * kSide * kSide);
    std::vector<int32_t> labels(kBatch);
    uint64_t state = uint64_t(step_index) * 7919u + uint64_t(rank) * 104729u + 1;
    for (float& v : images) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      v = float(int((state >> 33) % 2001) - 1000) / 1000.0f;
    }
    for (int i = 0; i < kBatch; ++i) labels[size_t(i)] = (i + step_index + rank) % kClasses;
    reduce(images, labels);
    sgd->step(0.05);
  }
};

AutotuneOptions small_search() {
  AutotuneOptions options;
  options.start = {true, 0.05};
  options.fusion_candidates_mib = {0.01, 1};
  options.warmup_steps = 1;
  options.steps_per_trial = 2;
  options.run_steps = 100;
  return options;
}

// Made-up step times. The last rank is the slow one: 1 MiB with overlap off is its fastest;
// the others would keep 0.01 MiB with overlap on. The slowest rank's times decide: overlap off,
// 1 MiB. 0.01 MiB's first step there is more than 25 % behind the start: one step is its trial.
double fake_seconds(const TuneSettings& s, int rank, int world) {
  static const std::map<std::pair<bool, double>, double> fast{
      {{true, 0.05}, 1.0}, {{true, 0.01}, 0.9},  {{true, 1}, 1.1},
      {{false, 1}, 1.3},   {{false, 0.05}, 1.2}, {{false, 0.01}, 1.1}};
  static const std::map<std::pair<bool, double>, double> slow{
      {{true, 0.05}, 2.0}, {{true, 0.01}, 2.6},  {{true, 1}, 1.6},
      {{false, 1}, 1.2},   {{false, 0.05}, 1.5}, {{false, 0.01}, 2.0}};
  return (rank == world - 1 ? slow : fast).at({s.overlap, s.fusion_mib});
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_rank_switches_at_the_same_step_and_stays_bitwise_identical) {
  comm::Communicator comm;
  const int rank = comm.rank(), world = comm.size();
  Replica replica(comm);
  replica.parallel->start_autotune(small_search());
  const auto& engine = replica.parallel->engine();
  if (world == 1) {  // nothing is reduced: no search, the start throughout
    for (int step = 0; step < 12; ++step) {
      BOOST_TEST((TuneSettings{engine.overlap(), engine.fusion_mib()} == TuneSettings{true, 0.05}));
      replica.step(step, rank);
      replica.parallel->end_step(fake_seconds({engine.overlap(), engine.fusion_mib()}, 0, 1));
    }
    BOOST_TEST(replica.parallel->autotuner()->report().source == "one rank");
    return;
  }
  bool identical = true;
  std::vector<double> layout;  // per step: overlap, fusion MiB and bucket count it ran with
  const int steps = 1 + 3 * 2 + 1 + 3;  // warm-up, 3 trials of two steps, one of one, the choice
  for (int step = 0; step < steps; ++step) {
    const TuneSettings ran{engine.overlap(), engine.fusion_mib()};
    layout.insert(layout.end(),
                  {double(ran.overlap), ran.fusion_mib, double(engine.bucket_count())});
    replica.step(step, rank);
    replica.parallel->end_step(fake_seconds(ran, rank, world));
    identical = identical && rt_test::identical_on_every_rank(replica.weights());
  }
  BOOST_TEST(rt_test::all_ok(identical), "weights bitwise identical on every rank, every step");
  // Every rank ran every step with the same settings and bucket layout.
  std::vector<float> as_float(layout.begin(), layout.end());
  BOOST_TEST(rt_test::identical_on_every_rank(as_float), "settings differ between ranks");
  // The trials in their order, then the choice; the buckets were laid out anew each time.
  const std::vector<std::pair<bool, double>> expected{
      {true, 0.05}, {true, 0.05}, {true, 0.05},  // warm-up, trial 1 (the start)
      {true, 0.01},                              // trial 2: abandoned after its first step
      {true, 1},    {true, 1},                   // trial 3: the fastest size on the slowest rank
      {false, 1},   {false, 1},                  // trial 4: overlap flipped at 1 MiB wins
      {false, 1},   {false, 1},   {false, 1}};   // the choice
  for (int step = 0; step < steps; ++step) {
    BOOST_TEST(layout[size_t(step) * 3] == double(expected[size_t(step)].first), "step " << step);
    BOOST_TEST(layout[size_t(step) * 3 + 1] == expected[size_t(step)].second, "step " << step);
  }
  BOOST_TEST(layout[3 * 3 + 2] > layout[1 * 3 + 2], "0.01 MiB buckets outnumber 0.05 MiB ones");
  BOOST_TEST(layout[4 * 3 + 2] < layout[1 * 3 + 2], "1 MiB buckets are fewer than 0.05 MiB ones");

  const comm::fusion::Autotuner& tuner = *replica.parallel->autotuner();
  BOOST_TEST(!tuner.searching());
  BOOST_TEST((tuner.settings() == TuneSettings{false, 1}));
  BOOST_TEST(replica.parallel->tuned_choice() != nullptr);
  if (rank == 0) {
    const auto& report = tuner.report();
    BOOST_TEST(report.source == "search");
    BOOST_TEST(report.decided_at_step == 8);
    BOOST_TEST(report.trials[1].steps == 1);
    BOOST_TEST_REQUIRE(report.trials.size() == 4u);
    BOOST_TEST(report.trials[0].rank_median_s.size() == size_t(world));
    BOOST_TEST(report.trials[0].slowest_s == 2.0);
    BOOST_TEST(report.chosen_step_s == 1.3);  // the fast ranks' 1.3 s: now the slowest
    // Steps at 2.0 (two), 2.6 (one) and 1.6 s (two) where 1.3 s was possible.
    BOOST_TEST(report.cost_s == 2 * 0.7 + 1.3 + 2 * 0.3, boost::test_tools::tolerance(1e-9));
  }
}

// --resume: the checkpoint's choice is applied from the first step, with no trials.
BOOST_AUTO_TEST_CASE(a_recorded_choice_is_applied_without_a_search) {
  comm::Communicator comm;
  Replica replica(comm);
  const TuneSettings chosen{false, 1};
  replica.parallel->start_autotune(small_search(), &chosen);
  const auto& engine = replica.parallel->engine();
  for (int step = 0; step < 6; ++step) {
    BOOST_TEST(!engine.overlap());
    BOOST_TEST(engine.fusion_mib() == 1.0);
    replica.step(step, comm.rank());
    replica.parallel->end_step(fake_seconds({true, 0.05}, comm.rank(), comm.size()));
  }
  BOOST_TEST(replica.parallel->autotuner()->report().source == "checkpoint");
  BOOST_TEST(replica.parallel->autotuner()->report().trials.empty());

  // A knob the deck fixes keeps the deck's value over the checkpoint's.
  Replica fixed(comm);
  AutotuneOptions options = small_search();
  options.search_overlap = false;
  fixed.parallel->start_autotune(options, &chosen);
  BOOST_TEST(fixed.parallel->engine().overlap());
  BOOST_TEST(fixed.parallel->engine().fusion_mib() == 1.0);
}
