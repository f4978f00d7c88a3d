// test_agreement.cpp — comm/agreement's words: rank lists (ranges, cut-off) and the one
// "ranks disagree" line, exactly as every message that names ranks prints them.
#include <boost/test/unit_test.hpp>

#include "ringtrain/comm/agreement.hpp"
#include "ringtrain/core/hash.hpp"

using namespace ringtrain;

BOOST_AUTO_TEST_SUITE(agreement)

BOOST_AUTO_TEST_CASE(rank_lists_use_ranges_of_three_or_more_and_stop_at_eight_items) {
  BOOST_TEST(comm::rank_list({2}) == "rank 2");
  BOOST_TEST(comm::rank_list({1, 3}) == "ranks 1, 3");
  BOOST_TEST(comm::rank_list({0, 1}) == "ranks 0, 1");
  BOOST_TEST(comm::rank_list({0, 1, 2, 3}) == "ranks 0-3");
  BOOST_TEST(comm::rank_list({0, 1, 2, 3, 7, 9, 10}) == "ranks 0-3, 7, 9, 10");
  BOOST_TEST(comm::rank_list({0, 2, 4, 6, 8, 10, 12, 14, 16, 18}) ==
             "ranks 0, 2, 4, 6, 8, 10, 12, 14 and 2 more");
}

BOOST_AUTO_TEST_CASE(one_line_names_the_first_differing_rank_then_the_others) {
  BOOST_TEST(comm::disagreement_line("train.lr", {1}, "0.1", "0.05") ==
             "ranks disagree on train.lr: rank 1 has 0.1, rank 0 has 0.05");
  BOOST_TEST(comm::disagreement_line("train.max_steps", {1, 2}, "3", "") ==
             "ranks disagree on train.max_steps: rank 1 has 3, rank 0 has \"\"; rank 2 differs "
             "from rank 0 too");
  BOOST_TEST(comm::disagreement_line("x", {1, 2, 3, 4, 5}, "a", "b") ==
             "ranks disagree on x: rank 1 has a, rank 0 has b; ranks 2-5 differ from rank 0 too");
}

// FNV-1a's step from our start value (core/hash.hpp says why it is not the published one):
// the same numbers on every platform, and the seeds of every run's initial weights.
BOOST_AUTO_TEST_CASE(the_hash_is_fnv1a_64_from_our_start_value) {
  BOOST_TEST(fnv1a("") == 1469598103934665603ull);
  BOOST_TEST(fnv1a("a") == 0x44bd8ad473cd9906ull);
  BOOST_TEST(fnv1a("foobar") == 0x88fad7c0a8ff07f2ull);
}

BOOST_AUTO_TEST_SUITE_END()
