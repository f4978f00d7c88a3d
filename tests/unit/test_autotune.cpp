// test_autotune.cpp — the autotune's coordinate search fed made-up step times: what it tries,
// in which order, what it picks, and that a fixed knob is not searched.
#include <boost/test/unit_test.hpp>
#include <map>

#include "ringtrain/comm/fusion/autotune.hpp"

using ringtrain::comm::fusion::AutotuneOptions;
using ringtrain::comm::fusion::CoordinateSearch;
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
