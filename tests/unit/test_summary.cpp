// test_summary.cpp — /summary from hand-made timings of 2 ranks: throughput at the slowest
// rank's pace, load imbalance, exposed communication both ways, the comm thread's CPU share.
#include <boost/test/unit_test.hpp>

#include "ringtrain/train/report.hpp"

using namespace ringtrain;

namespace {

constexpr double kTolerance = 1e-12;

// Row-major [rank][step], seconds.
io::Timings two_ranks(std::vector<double> step, std::vector<double> wait) {
  io::Timings t;
  t.world_size = 2;
  t.steps = int64_t(step.size() / 2);
  t.phases["step"] = std::move(step);
  t.phases["allreduce_wait"] = std::move(wait);
  return t;
}

void add_bucket(io::CommRecords& c, int rank, int64_t step, double seconds, double cpu) {
  c.rank.push_back(rank);
  c.step.push_back(step);
  c.bucket.push_back(0);
  c.bytes.push_back(4096);
  c.tensors.push_back(1);
  c.start_s.push_back(0);
  c.seconds.push_back(seconds);
  c.cpu_seconds.push_back(cpu);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(summary)

BOOST_AUTO_TEST_CASE(two_ranks_four_steps_one_warm_up) {
  // Step 0 is warm-up: its 9 s steps and its 5 s bucket must not count anywhere.
  io::Timings t = two_ranks({9, 1.0, 1.2, 1.0, /* rank 1 */ 9, 1.1, 1.0, 1.0},
                            {0, 0.30, 0.02, 0.1, /* rank 1 */ 0, 0.05, 0.25, 0.1});
  io::CommRecords c;
  add_bucket(c, 0, 0, 5.0, 9.0);
  add_bucket(c, 0, 1, 0.4, 0.01);
  add_bucket(c, 0, 1, 0.1, 0.02);
  add_bucket(c, 0, 2, 0.2, 0.03);
  add_bucket(c, 0, 3, 0.5, 0.04);
  add_bucket(c, 1, 1, 0.3, 0.05);
  add_bucket(c, 1, 2, 0.5, 0.06);
  add_bucket(c, 1, 3, 0.4, 0.07);
  io::Summary s = train::summarise(t, c, 1, 64);

  // Steps last as long as their slowest rank: 1.1 + 1.2 + 1.0 s for 3 x 64 images.
  BOOST_TEST(s.images_per_s == 64.0 * 3 / 3.3, boost::test_tools::tolerance(kTolerance));
  // Rank 0 stepped 3.2 s, rank 1 3.1 s.
  BOOST_TEST(s.load_imbalance == 3.2 / 3.15, boost::test_tools::tolerance(kTolerance));
  // All waits (0.82 s) over all allreduce time (2.4 s).
  BOOST_TEST(s.exposed_comm_fraction == 0.82 / 2.4, boost::test_tools::tolerance(kTolerance));
  // Last to wait: rank 1 in step 1 (0.05 of 0.3 s), rank 0 in step 2 (0.02 of 0.2 s) and, on
  // a tie, the lower rank in step 3 (0.1 of 0.5 s).
  BOOST_TEST(s.exposed_comm_fraction_last_rank == 0.17 / 1.0,
             boost::test_tools::tolerance(kTolerance));
  // 0.28 s of comm thread CPU over two ranks' 3.15 s mean step time.
  BOOST_TEST(s.comm_cpu_fraction == 0.14 / 3.15, boost::test_tools::tolerance(kTolerance));
}

BOOST_AUTO_TEST_CASE(one_rank_exposes_nothing) {
  io::Timings t;
  t.world_size = 1;
  t.steps = 2;
  t.phases["step"] = {0.5, 0.5};
  t.phases["allreduce_wait"] = {0.001, 0.001};
  io::CommRecords c;
  add_bucket(c, 0, 0, 0.3, 0.2);  // warm-up: must not count
  add_bucket(c, 0, 1, 0.01, 0.004);
  io::Summary s = train::summarise(t, c, 1, 32);
  // One timed step of 0.5 s for 32 images.
  BOOST_TEST(s.images_per_s == 64.0, boost::test_tools::tolerance(kTolerance));
  BOOST_TEST(s.exposed_comm_fraction == 0.0);
  BOOST_TEST(s.exposed_comm_fraction_last_rank == 0.0);
  BOOST_TEST(s.load_imbalance == 1.0);
  // Step 1's 0.004 s of comm thread CPU over its 0.5 s step.
  BOOST_TEST(s.comm_cpu_fraction == 0.004 / 0.5, boost::test_tools::tolerance(kTolerance));
}

BOOST_AUTO_TEST_SUITE_END()
