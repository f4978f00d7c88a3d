// test_autotune.cpp — the autotune's coordinate search fed made-up step times: what it tries,
// in which order, what it picks, and that a fixed knob is not searched.
#include <boost/test/unit_test.hpp>
#include <map>

#include "ringtrain/comm/fusion/autotune.hpp"
#include "ringtrain/comm/fusion/fusion_engine.hpp"
#include "ringtrain/train/data_parallel.hpp"

using ringtrain::comm::fusion::AutotuneOptions;
using ringtrain::comm::fusion::CoordinateSearch;
using ringtrain::comm::fusion::FusionOptions;
using ringtrain::comm::fusion::TuneSettings;

namespace {

// Runs the search to its end with a step time for each setting; returns the settings tried.
std::vector<TuneSettings> run(CoordinateSearch& search,
                              const std::map<std::pair<bool, double>, double>& seconds) {
  std::vector<TuneSettings> tried;
  while (!search.finished()) {
    const TuneSettings s = search.current();
    tried.push_back(s);
    search.record(seconds.at({s.overlap, s.fusion_mib}));
  }
  return tried;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(autotune)

// comm.fusion_mib has one default: an engine built without a deck (the benches, the tests) runs
// the size the trainer's engine starts at under comm.fusion_mib = auto, the autotune's start.
// (It was 64 MiB for the one, 16 for the other.) A value in the deck reaches both.
BOOST_AUTO_TEST_CASE(fusion_mib_has_one_default_and_the_deck_reaches_engine_and_search) {
  const ringtrain::CommConfig deck;  // comm.fusion_mib = auto, comm.overlap = auto
  BOOST_TEST(FusionOptions{}.fusion_mib == TuneSettings{}.fusion_mib);
  BOOST_TEST(ringtrain::train::engine_options(deck).fusion_mib == TuneSettings{}.fusion_mib);
  BOOST_TEST(ringtrain::train::autotune_options(deck, 0).start.fusion_mib ==
             TuneSettings{}.fusion_mib);
  BOOST_TEST(ringtrain::train::engine_options(deck).overlap);
  ringtrain::CommConfig fixed;
  fixed.fusion_mib = "2";
  fixed.overlap = "false";
  fixed.first_bucket_mib = 0.25;
  fixed.stall_timeout_s = 7;
  fixed.local_gate = false;
  const FusionOptions engine = ringtrain::train::engine_options(fixed);
  BOOST_TEST(engine.fusion_mib == 2.0);
  BOOST_TEST(!engine.overlap);
  BOOST_TEST(engine.first_bucket_mib == 0.25);
  BOOST_TEST(engine.stall_timeout_s == 7.0);
  BOOST_TEST(!engine.local_gate);
  BOOST_TEST(ringtrain::train::autotune_options(fixed, 0).start.fusion_mib == 2.0);
}

// The searches below try 4 and 64 MiB beside the start's 16.
AutotuneOptions four_and_64() {
  AutotuneOptions options;
  options.fusion_candidates_mib = {4, 64};
  return options;
}

// The start (overlap on, 16 MiB) is the wrong first choice here: 4 MiB buckets are faster, and
// overlap off faster still at that size. The sizes are tried with overlap on first, then
// overlap flipped at the fastest size; the search ends at overlap off, 4 MiB.
BOOST_AUTO_TEST_CASE(a_wrong_start_ends_at_the_faster_setting) {
  CoordinateSearch search(four_and_64());
  const auto tried =
      run(search, {{{true, 16}, 1.00}, {{true, 4}, 0.95}, {{true, 64}, 0.97}, {{false, 4}, 0.85}});
  BOOST_TEST_REQUIRE(tried.size() == 4u);
  BOOST_TEST((tried[0] == TuneSettings{true, 16}));
  BOOST_TEST((tried[1] == TuneSettings{true, 4}));
  BOOST_TEST((tried[2] == TuneSettings{true, 64}));
  // Overlap is flipped at the fastest size, not the start's.
  BOOST_TEST((tried[3] == TuneSettings{false, 4}));
  BOOST_TEST((search.best() == TuneSettings{false, 4}));
  BOOST_TEST((search.current() == TuneSettings{false, 4}));
  BOOST_TEST(search.reason().find("overlap off, fusion 4 MiB is 15% faster than the start") !=
                 std::string::npos,
             search.reason());
}

// Within the margin (2 %) the start stays: noise must not move a setting that is as good.
BOOST_AUTO_TEST_CASE(a_challenger_within_the_margin_does_not_replace_the_start) {
  CoordinateSearch search(four_and_64());
  run(search, {{{true, 16}, 1.00}, {{true, 4}, 0.99}, {{true, 64}, 1.2}, {{false, 16}, 0.985}});
  BOOST_TEST((search.best() == TuneSettings{true, 16}));
  BOOST_TEST(search.reason().find("the start kept") != std::string::npos, search.reason());
}

// A knob the deck fixes is never varied: comm.overlap = false searches only the fusion sizes.
BOOST_AUTO_TEST_CASE(a_fixed_knob_is_not_searched) {
  AutotuneOptions options = four_and_64();
  options.search_overlap = false;
  options.start.overlap = false;
  CoordinateSearch search(options);
  const auto tried = run(search, {{{false, 16}, 1.0}, {{false, 4}, 1.5}, {{false, 64}, 0.8}});
  BOOST_TEST_REQUIRE(tried.size() == 3u);
  for (const TuneSettings& s : tried) BOOST_TEST(!s.overlap);
  BOOST_TEST((search.best() == TuneSettings{false, 64}));

  AutotuneOptions fusion_fixed = four_and_64();
  fusion_fixed.search_fusion = false;
  fusion_fixed.start.fusion_mib = 0.5;
  CoordinateSearch overlap_only(fusion_fixed);
  const auto tried2 = run(overlap_only, {{{true, 0.5}, 1.0}, {{false, 0.5}, 0.5}});
  BOOST_TEST(tried2.size() == 2u);
  BOOST_TEST((overlap_only.best() == TuneSettings{false, 0.5}));

  AutotuneOptions both_fixed = four_and_64();
  both_fixed.search_fusion = false;
  both_fixed.search_overlap = false;
  CoordinateSearch none(both_fixed);
  BOOST_TEST(none.finished());
  BOOST_TEST(none.trials() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
