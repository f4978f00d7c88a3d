// test_fibergen.cpp — rt-fibergen: the acceptance tables on hand-built defects, labels against
// what was drawn, determinism across shard and thread counts, shard attributes, bad options.
#include <signal.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ringtrain/data/shard/format.hpp"
#include "ringtrain/fiber/generator.hpp"
#include "ringtrain/io/h5.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace ringtrain;
using namespace ringtrain::fiber;

namespace {

using rt_test::temp_dir;

// A defect lying between radii r0 and r1 (micrometres from the fiber centre).
Defect at(DefectKind kind, double size_um, double r0, double r1) {
  return {kind, size_um, r0, r1};
}

bool passes(FiberType type, const std::vector<Defect>& defects) {
  return judge(acceptance_table(type), defects).pass;
}

std::vector<bool> zone_verdicts(FiberType type, const std::vector<Defect>& defects) {
  Verdict v = judge(acceptance_table(type), defects);
  return std::vector<bool>(v.zone_pass.begin(), v.zone_pass.end());
}

// Every row of one dataset over a split's shards, in shard order.
template <typename T>
std::vector<T> concat_split(const std::string& dir, const std::string& split, int shards,
                            const std::string& name) {
  std::vector<T> all;
  for (int s = 0; s < shards; ++s) {
    auto file = h5::File::open_read(dir + "/" + data::shard::file_name(split, s, shards));
    auto rows = file.root().open_dataset(name).read_all<T>();
    all.insert(all.end(), rows.begin(), rows.end());
  }
  return all;
}

DatasetOptions small_dataset(const std::string& dir, int shards, uint64_t seed) {
  DatasetOptions o;
  o.output_dir = dir;
  o.count = 60;
  o.seed = seed;
  o.shards = shards;
  o.threads = 2;
  return o;
}

// Runs the command line; returns the exit code, with stderr in *err.
int run(std::vector<std::string> args, std::string* err) {
  args.insert(args.begin(), "rt-fibergen");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, errors;
  int code = run_fibergen(int(argv.size()), argv.data(), out, errors);
  *err = errors.str();
  return code;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fiber_acceptance)

BOOST_AUTO_TEST_CASE(single_mode_scratches_in_zone_b) {
  // Zone B of single-mode spans radii 12.5-57.5 um.
  BOOST_TEST(!passes(FiberType::kSmUpc, {at(DefectKind::kScratch, 4, 20, 50)}));
  BOOST_TEST(passes(FiberType::kSmUpc, {at(DefectKind::kScratch, 2, 20, 50)}));
  BOOST_TEST(passes(FiberType::kSmUpc, {at(DefectKind::kScratch, 3, 20, 50)}));  // "<= 3 um"
  BOOST_TEST(
      passes(FiberType::kSmUpc, std::vector<Defect>(30, at(DefectKind::kScratch, 1, 20, 50))));
  // Angle-polished single-mode sets no scratch limit in zone B.
  BOOST_TEST(passes(FiberType::kSmApc, {at(DefectKind::kScratch, 3.2, 20, 50)}));
  // Lint is a linear feature and is measured like a scratch.
  BOOST_TEST(!passes(FiberType::kSmUpc, {at(DefectKind::kLint, 4, 20, 50)}));
  BOOST_TEST((zone_verdicts(FiberType::kSmUpc, {at(DefectKind::kScratch, 4, 20, 50)}) ==
              std::vector<bool>{true, false, true, true}));
}

BOOST_AUTO_TEST_CASE(zone_a_and_cracks) {
  BOOST_TEST(!passes(FiberType::kSmUpc, {at(DefectKind::kScratch, 0.5, 5, 9)}));
  BOOST_TEST(!passes(FiberType::kSmUpc, {at(DefectKind::kPit, 1, 3, 4)}));
  BOOST_TEST(!passes(FiberType::kSmUpc, {at(DefectKind::kCrack, 1, 0, 10)}));
  BOOST_TEST(!passes(FiberType::kMmUpc, {at(DefectKind::kCrack, 1, 40, 50)}));  // zone B
  BOOST_TEST(passes(FiberType::kSmUpc, {at(DefectKind::kCrack, 1, 60, 66)}));   // zone C only
  // A defect that crosses from C into B counts in B.
  BOOST_TEST(!passes(FiberType::kSmUpc, {at(DefectKind::kCrack, 1, 55, 66)}));
  BOOST_TEST((zone_verdicts(FiberType::kSmUpc, {at(DefectKind::kCrack, 1, 0, 20)}) ==
              std::vector<bool>{false, false, true, true}));
}

BOOST_AUTO_TEST_CASE(defect_counts_and_sizes) {
  auto pits = [](int n, double size) {
    return std::vector<Defect>(size_t(n), at(DefectKind::kPit, size, 30, 30 + size));
  };
  BOOST_TEST(passes(FiberType::kSmUpc, pits(5, 3)));
  BOOST_TEST(!passes(FiberType::kSmUpc, pits(6, 3)));    // "up to 5 of 2-5 um"
  BOOST_TEST(passes(FiberType::kSmUpc, pits(40, 1.9)));  // "any < 2 um"
  BOOST_TEST(passes(FiberType::kSmUpc, pits(1, 5)));
  BOOST_TEST(!passes(FiberType::kSmUpc, pits(1, 5.5)));  // "none > 5 um"
  // Zone D (67.5-125 um): "none >= 10 um".
  BOOST_TEST(passes(FiberType::kSmUpc, {at(DefectKind::kDust, 9.9, 80, 90)}));
  BOOST_TEST(!passes(FiberType::kSmUpc, {at(DefectKind::kDust, 10, 80, 90)}));
  BOOST_TEST(passes(FiberType::kSmUpc, {at(DefectKind::kScratch, 6, 70, 120)}));
  // Outside zone D nothing is inspected.
  BOOST_TEST(passes(FiberType::kSmUpc, {at(DefectKind::kDust, 25, 126, 150)}));
}

BOOST_AUTO_TEST_CASE(anything_in_zone_c_passes) {
  // Zone C spans radii 57.5-67.5 um for every fiber type.
  for (FiberType t : {FiberType::kSmUpc, FiberType::kSmApc, FiberType::kMmUpc})
    BOOST_TEST(passes(t, {at(DefectKind::kScratch, 6, 58, 67), at(DefectKind::kChip, 30, 58, 67),
                          at(DefectKind::kCrack, 2, 58, 67), at(DefectKind::kOilFilm, 9, 58, 67),
                          at(DefectKind::kPit, 12, 58, 67), at(DefectKind::kPit, 12, 58, 67)}));
}

BOOST_AUTO_TEST_CASE(multimode_table_differs) {
  // Zone A of multimode is 0-32.5 um: scratches <= 3 um and 4 defects <= 5 um are allowed.
  BOOST_TEST(passes(FiberType::kMmUpc, {at(DefectKind::kScratch, 2, 10, 30)}));
  BOOST_TEST(!passes(FiberType::kSmUpc, {at(DefectKind::kScratch, 2, 10, 30)}));
  BOOST_TEST(!passes(FiberType::kMmUpc, {at(DefectKind::kScratch, 4, 10, 30)}));
  std::vector<Defect> four(4, at(DefectKind::kPit, 4, 10, 14));
  BOOST_TEST(passes(FiberType::kMmUpc, four));
  four.push_back(at(DefectKind::kPit, 4, 10, 14));
  BOOST_TEST(!passes(FiberType::kMmUpc, four));
  // Zone B (32.5-57.5 um) allows scratches up to 5 um.
  BOOST_TEST(passes(FiberType::kMmUpc, {at(DefectKind::kScratch, 4.5, 40, 50)}));
  BOOST_TEST(zones_touched(acceptance_table(FiberType::kMmUpc), 30, 40) == 0b0011u);
  BOOST_TEST(zones_touched(acceptance_table(FiberType::kSmUpc), 30, 40) == 0b0010u);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// FIBER.md's acceptance table, spelt in its own phrases, so a row of acceptance.cpp that drifts
// from the document fails here. `a`, `n` and `b` are the numbers of the phrase.
struct Phrase {
  enum Form { kNone, kNoLimit, kAnyUpTo, kCounted, kCountUpTo, kNoneFrom } form;
  double a = 0;  // kAnyUpTo, kNoneFrom: the bound; kCounted: the free bound
  int n = 0;     // kCounted, kCountUpTo: how many counted defects pass
  double b = 0;  // kCounted, kCountUpTo: the largest counted size
};
const Phrase kNonePhrase{Phrase::kNone};        // "none"
const Phrase kNoLimitPhrase{Phrase::kNoLimit};  // "no limit"
// "any <= um; none > um"
Phrase any_up_to(double um) {
  return {Phrase::kAnyUpTo, um};
}
// "none >= um"
Phrase none_from(double um) {
  return {Phrase::kNoneFrom, um};
}
// "n <= um" (and none larger)
Phrase count_up_to(int n, double um) {
  return {Phrase::kCountUpTo, 0, n, um};
}
// "any < free_um; n of free_um-counted_um; none > counted_um"
Phrase counted(double free_um, int n, double counted_um) {
  return {Phrase::kCounted, free_um, n, counted_um};
}

char zone_name(Zone z) {
  return "ABCD"[z];
}

constexpr double kJust = 0.01;  // "just inside" and "just outside" a bound, in um
enum class Family { kScratches, kDefects };

// The drawn kinds one column of the table judges: scratches and lint are linear features;
// pits, chips, dust and oil films are defects.
std::vector<DefectKind> kinds_of(Family family) {
  if (family == Family::kScratches) return {DefectKind::kScratch, DefectKind::kLint};
  return {DefectKind::kPit, DefectKind::kChip, DefectKind::kDust, DefectKind::kOilFilm};
}

// n defects of one size lying in the middle half of zone z, touching no other zone.
std::vector<Defect> in_zone(FiberType type, Zone z, DefectKind kind, int n, double size_um) {
  const auto& d = acceptance_table(type).zone_diameter_um;
  const double inner = d[z] / 2, width = (d[z + 1] - d[z]) / 2;
  return std::vector<Defect>(size_t(n),
                             at(kind, size_um, inner + width / 4, inner + width * 3 / 4));
}

// One end face and the verdict FIBER.md gives it: only zone z may fail.
struct Probe {
  int n;
  double size_um;
  bool pass;
  std::string why;
};

std::vector<Probe> probes_for(const Phrase& p) {
  switch (p.form) {
    case Phrase::kNone:
      return {{1, 0.1, false, "none: the smallest fails"}};
    case Phrase::kNoLimit:
      return {{50, 0.1, true, "no limit: many small"}, {50, 250, true, "no limit: many large"}};
    case Phrase::kAnyUpTo:
      return {{50, p.a - kJust, true, "any below the bound"},
              {50, p.a, true, "any at the bound (<=)"},
              {1, p.a + kJust, false, "none above the bound"}};
    case Phrase::kCountUpTo:
      return {{p.n, p.b, true, "n at the bound (<=)"},
              {p.n + 1, 0.1, false, "one more than n, however small"},
              {1, p.b + kJust, false, "none above the bound"}};
    case Phrase::kCounted:
      return {{50, p.a - kJust, true, "any below the free bound (<)"},
              {p.n, p.a, true, "n at the free bound: counted"},
              {p.n + 1, p.a, false, "n + 1 at the free bound: it is counted, not free (<)"},
              {p.n, p.b, true, "n at the counted bound (<=)"},
              {p.n + 1, p.b, false, "n + 1 at the counted bound"},
              {1, p.b + kJust, false, "none above the counted bound"}};
    case Phrase::kNoneFrom:
      return {{50, p.a - kJust, true, "any below the bound (<)"},
              {1, p.a, false, "none at the bound (>=)"}};
  }
  return {};
}

void check_row(FiberType type, Zone z, Family family, const Phrase& phrase) {
  for (const Probe& probe : probes_for(phrase))
    for (DefectKind kind : kinds_of(family))
      BOOST_TEST_CONTEXT(fiber_type_name(type) << " zone " << zone_name(z) << ": " << probe.n
                                               << " x " << defect_kind_name(kind) << " "
                                               << probe.size_um << " um (" << probe.why << ")") {
        std::vector<Defect> face = in_zone(type, z, kind, probe.n, probe.size_um);
        // The free ones never use up the count: add many just below a free bound.
        if (phrase.form == Phrase::kCounted)
          for (const Defect& d : in_zone(type, z, kind, 20, phrase.a - kJust)) face.push_back(d);
        std::vector<bool> zones{true, true, true, true};
        zones[z] = probe.pass;
        BOOST_TEST(zone_verdicts(type, face) == zones);
        BOOST_TEST(passes(type, face) == probe.pass);
      }
}

// A table row per test case, <fiber type>_<zone>_<column>, with the phrase FIBER.md gives it.
#define FIBER_ROW(name, type, zone, family, phrase)           \
  BOOST_AUTO_TEST_CASE(name) {                                \
    check_row(FiberType::type, zone, Family::family, phrase); \
  }

}  // namespace

BOOST_AUTO_TEST_SUITE(fiber_acceptance_rows)

BOOST_AUTO_TEST_CASE(zone_diameters_follow_fiber_md) {
  using D = std::array<double, kZones + 1>;
  BOOST_TEST((acceptance_table(FiberType::kSmUpc).zone_diameter_um == D{0, 25, 115, 135, 250}));
  BOOST_TEST((acceptance_table(FiberType::kSmApc).zone_diameter_um == D{0, 25, 115, 135, 250}));
  BOOST_TEST((acceptance_table(FiberType::kMmUpc).zone_diameter_um == D{0, 65, 115, 135, 250}));
}

// "Any crack in zone A or B fails", for every fiber type; C and D have no limit.
BOOST_AUTO_TEST_CASE(cracks_fail_in_zones_a_and_b_only) {
  for (FiberType type : {FiberType::kSmUpc, FiberType::kSmApc, FiberType::kMmUpc})
    for (Zone z : {kZoneA, kZoneB, kZoneC, kZoneD})
      BOOST_TEST_CONTEXT(fiber_type_name(type) << " zone " << zone_name(z)) {
        std::vector<bool> zones{true, true, true, true};
        zones[z] = z >= kZoneC;
        BOOST_TEST(zone_verdicts(type, in_zone(type, z, DefectKind::kCrack, 1, 0.5)) == zones);
      }
}

// SM UPC
FIBER_ROW(sm_upc_a_scratches, kSmUpc, kZoneA, kScratches, kNonePhrase)
FIBER_ROW(sm_upc_a_defects, kSmUpc, kZoneA, kDefects, kNonePhrase)
FIBER_ROW(sm_upc_b_scratches, kSmUpc, kZoneB, kScratches, any_up_to(3))
FIBER_ROW(sm_upc_b_defects, kSmUpc, kZoneB, kDefects, counted(2, 5, 5))
FIBER_ROW(sm_upc_c_scratches, kSmUpc, kZoneC, kScratches, kNoLimitPhrase)
FIBER_ROW(sm_upc_c_defects, kSmUpc, kZoneC, kDefects, kNoLimitPhrase)
FIBER_ROW(sm_upc_d_scratches, kSmUpc, kZoneD, kScratches, kNoLimitPhrase)
FIBER_ROW(sm_upc_d_defects, kSmUpc, kZoneD, kDefects, none_from(10))
// SM APC
FIBER_ROW(sm_apc_a_scratches, kSmApc, kZoneA, kScratches, count_up_to(4, 3))
FIBER_ROW(sm_apc_a_defects, kSmApc, kZoneA, kDefects, kNonePhrase)
FIBER_ROW(sm_apc_b_scratches, kSmApc, kZoneB, kScratches, kNoLimitPhrase)
FIBER_ROW(sm_apc_b_defects, kSmApc, kZoneB, kDefects, counted(2, 5, 5))
FIBER_ROW(sm_apc_c_scratches, kSmApc, kZoneC, kScratches, kNoLimitPhrase)
FIBER_ROW(sm_apc_c_defects, kSmApc, kZoneC, kDefects, kNoLimitPhrase)
FIBER_ROW(sm_apc_d_scratches, kSmApc, kZoneD, kScratches, kNoLimitPhrase)
FIBER_ROW(sm_apc_d_defects, kSmApc, kZoneD, kDefects, none_from(10))
// MM
FIBER_ROW(mm_upc_a_scratches, kMmUpc, kZoneA, kScratches, any_up_to(3))
FIBER_ROW(mm_upc_a_defects, kMmUpc, kZoneA, kDefects, count_up_to(4, 5))
FIBER_ROW(mm_upc_b_scratches, kMmUpc, kZoneB, kScratches, any_up_to(5))
FIBER_ROW(mm_upc_b_defects, kMmUpc, kZoneB, kDefects, counted(5, 5, 10))
FIBER_ROW(mm_upc_c_scratches, kMmUpc, kZoneC, kScratches, kNoLimitPhrase)
FIBER_ROW(mm_upc_c_defects, kMmUpc, kZoneC, kDefects, kNoLimitPhrase)
FIBER_ROW(mm_upc_d_scratches, kMmUpc, kZoneD, kScratches, kNoLimitPhrase)
FIBER_ROW(mm_upc_d_defects, kMmUpc, kZoneD, kDefects, counted(20, 5, 30))

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(fiber_render)

BOOST_AUTO_TEST_CASE(labels_follow_what_was_drawn) {
  RenderOptions opts{64, FiberChoice::kMixed, false};
  RenderOptions unpainted = opts;
  unpainted.skip_defect_painting = true;
  std::vector<int> per_class(kClasses, 0);
  const int n = 400;
  std::vector<Sample> painted = render_range(11, 0, 0, n, opts, 2);
  std::vector<Sample> bare = render_range(11, 0, 0, n, unpainted, 2);
  for (int i = 0; i < n; ++i) {
    const Sample& s = painted[i];
    BOOST_TEST_CONTEXT("image " << i << " label " << s.label) {
      ++per_class[s.label];
      BOOST_TEST(s.pixels.size() == 64u * 64u);
      // Same random stream, same labels: only the defects' paint is missing.
      BOOST_TEST(bare[i].defects.size() == s.defects.size());
      BOOST_TEST(bare[i].label == s.label);
      std::array<uint8_t, kClasses> hot{};
      int most_severe = kClean;
      for (const Defect& d : s.defects) {
        hot[defect_class(d.kind)] = 1;
        if (class_severity(defect_class(d.kind)) > class_severity(most_severe))
          most_severe = defect_class(d.kind);
      }
      if (s.defects.empty()) hot[kClean] = 1;
      BOOST_TEST(s.label == most_severe);
      BOOST_TEST((s.multi_hot == hot));
      Verdict v = judge(acceptance_table(s.fiber), s.defects);
      BOOST_TEST(s.pass == uint8_t(v.pass));
      for (int z = 0; z < kZones; ++z) BOOST_TEST(s.zone_pass[z] == uint8_t(v.zone_pass[z]));
      if (s.label == kClean) {
        BOOST_TEST(s.defects.empty());
        BOOST_TEST((s.multi_hot == std::array<uint8_t, kClasses>{1, 0, 0, 0, 0}));
        BOOST_TEST(s.pass == 1);
        BOOST_TEST(s.pixels == bare[i].pixels);  // nothing was painted
      } else {
        BOOST_TEST(s.pixels != bare[i].pixels);  // the defects show
      }
    }
  }
  // The primary class is drawn uniformly: each near 20% of 400.
  for (int c = 0; c < kClasses; ++c) BOOST_TEST_CONTEXT("class " << c) {
      BOOST_TEST(per_class[c] >= 55);
      BOOST_TEST(per_class[c] <= 105);
    }
}

BOOST_AUTO_TEST_CASE(sizes_stay_in_fiber_md_ranges) {
  std::vector<Sample> samples = render_range(5, 0, 0, 300, {64, FiberChoice::kSmUpc, true}, 2);
  for (const Sample& s : samples)
    for (const Defect& d : s.defects)
      BOOST_TEST_CONTEXT(defect_kind_name(d.kind) << " " << d.size_um) {
        switch (d.kind) {
          case DefectKind::kScratch:
            BOOST_TEST((d.size_um >= 0.5 && d.size_um <= 6));
            break;
          case DefectKind::kPit:
            BOOST_TEST((d.size_um >= 1 && d.size_um <= 12));
            break;
          case DefectKind::kChip:
            BOOST_TEST((d.size_um >= 5 && d.size_um <= 30));
            break;
          case DefectKind::kCrack:
            BOOST_TEST((d.size_um >= 0.5 && d.size_um <= 2));
            break;
          case DefectKind::kDust:
            BOOST_TEST((d.size_um >= 1 && d.size_um <= 25));
            break;
          case DefectKind::kLint:
            BOOST_TEST((d.size_um >= 2 && d.size_um <= 5));
            break;
          case DefectKind::kOilFilm:
            BOOST_TEST((d.size_um >= 20 && d.size_um <= 150));
            break;
        }
        BOOST_TEST(d.r_min_um <= d.r_max_um);
      }
}

BOOST_AUTO_TEST_CASE(an_image_depends_only_on_seed_split_and_index) {
  RenderOptions opts{64, FiberChoice::kMixed, false};
  std::vector<Sample> one = render_range(7, 0, 100, 24, opts, 1);
  std::vector<Sample> three = render_range(7, 0, 100, 24, opts, 3);
  for (size_t i = 0; i < one.size(); ++i) {
    BOOST_TEST(one[i].pixels == three[i].pixels);
    BOOST_TEST(one[i].pixels == render_sample(7, 0, 100 + i, opts).pixels);
    BOOST_TEST(one[i].pixels != render_sample(8, 0, 100 + i, opts).pixels);  // seed
    BOOST_TEST(one[i].pixels != render_sample(7, 1, 100 + i, opts).pixels);  // split
  }
  BOOST_TEST(one[0].pixels != one[1].pixels);
  // The larger sizes are the same render, averaged less.
  Sample big = render_sample(7, 0, 100, {256, FiberChoice::kMixed, false});
  BOOST_TEST(big.pixels.size() == 256u * 256u);
  BOOST_TEST(big.label == one[0].label);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(fiber_dataset)

BOOST_AUTO_TEST_CASE(same_bytes_for_one_and_four_shards) {
  std::string one = temp_dir("fib1"), four = temp_dir("fib4"), other = temp_dir("fibs");
  generate_dataset(small_dataset(one, 1, 42), nullptr);
  generate_dataset(small_dataset(four, 4, 42), nullptr);
  generate_dataset(small_dataset(other, 1, 43), nullptr);
  for (const char* split : {"train", "val", "test"}) BOOST_TEST_CONTEXT(split) {
      auto images = concat_split<uint8_t>(one, split, 1, "images");
      BOOST_TEST(images == concat_split<uint8_t>(four, split, 4, "images"));
      BOOST_TEST(images != concat_split<uint8_t>(other, split, 1, "images"));
      BOOST_TEST(concat_split<int32_t>(one, split, 1, "labels") ==
                 concat_split<int32_t>(four, split, 4, "labels"));
      for (const char* name : {"multi_hot", "pass", "zone_pass", "fiber_type"})
        BOOST_TEST(concat_split<uint8_t>(one, split, 1, name) ==
                   concat_split<uint8_t>(four, split, 4, name));
    }
  // 60 images: 48 train, 6 val, 6 test; the train images are the library's render.
  auto labels = concat_split<int32_t>(one, "train", 1, "labels");
  BOOST_TEST(labels.size() == 48u);
  auto images = concat_split<uint8_t>(one, "train", 1, "images");
  Sample s = render_sample(42, 0, 47, {64, FiberChoice::kSmUpc, false});
  BOOST_TEST(std::equal(s.pixels.begin(), s.pixels.end(), images.end() - 64 * 64));
  BOOST_TEST(labels.back() == s.label);
  // Every file is in place and no temp file is left.
  BOOST_TEST(std::distance(fs::directory_iterator(four), fs::directory_iterator()) == 12);
}

BOOST_AUTO_TEST_CASE(shards_carry_every_attribute) {
  std::string dir = temp_dir("fibattr");
  DatasetOptions o = small_dataset(dir, 2, 9);
  o.fiber = FiberChoice::kMixed;
  DatasetSummary summary = generate_dataset(o, nullptr);
  BOOST_TEST(summary.files.size() == 6u);
  for (const auto& split : summary.splits)
    for (int s = 0; s < 2; ++s) BOOST_TEST_CONTEXT(split.name << " " << s) {
        auto file = h5::File::open_read(dir + "/" + data::shard::file_name(split.name, s, 2));
        const auto& root = file.root();
        BOOST_TEST(root.attr_string(data::shard::kAttrFormat) == data::shard::kFormatName);
        BOOST_TEST(root.attr<int32_t>(data::shard::kAttrFormatVersion) ==
                   data::shard::kFormatVersion);
        BOOST_TEST(root.attr_string(data::shard::kAttrDataset) == "fiber");
        BOOST_TEST(root.attr_string(data::shard::kAttrSplit) == split.name);
        BOOST_TEST(root.attr_strings(data::shard::kAttrClassNames) == class_names());
        BOOST_TEST(
            (root.attr_vector<float>(data::shard::kAttrMean) == std::vector<float>{summary.mean}));
        BOOST_TEST(
            (root.attr_vector<float>(data::shard::kAttrStd) == std::vector<float>{summary.std}));
        BOOST_TEST(root.attr<int32_t>(data::shard::kAttrShardIndex) == s);
        BOOST_TEST(root.attr<int32_t>(data::shard::kAttrShardCount) == 2);
        BOOST_TEST(root.attr<int64_t>(data::shard::kAttrFirstSample) == split.samples * s / 2);
        BOOST_TEST(root.attr<int64_t>(data::shard::kAttrSplitSamples) == split.samples);
        BOOST_TEST(root.attr<float>("um_per_pixel") == 4.4f);
        BOOST_TEST(root.attr_string("fiber_type") == "mixed");
        BOOST_TEST(root.attr<uint64_t>("generator_seed") == 9u);
        BOOST_TEST(root.attr<int32_t>("generator_version") == kGeneratorVersion);
        auto images = root.open_dataset(data::shard::kImages);
        const hsize_t rows = hsize_t(split.samples * (s + 1) / 2 - split.samples * s / 2);
        BOOST_TEST((images.dims() == h5::Dims{rows, 1, 64, 64}));
        BOOST_TEST(images.holds<uint8_t>());
        BOOST_TEST((root.open_dataset(data::shard::kLabels).dims() == h5::Dims{rows}));
        BOOST_TEST(root.open_dataset(data::shard::kLabels).holds<int32_t>());
        BOOST_TEST((root.open_dataset("multi_hot").dims() == h5::Dims{rows, 5}));
        BOOST_TEST((root.open_dataset("pass").dims() == h5::Dims{rows}));
        BOOST_TEST((root.open_dataset("zone_pass").dims() == h5::Dims{rows, 4}));
      }
  // The statistics are over the train images, in pixel / 255.
  auto train = concat_split<uint8_t>(dir, "train", 2, "images");
  double sum = 0, sum_sq = 0;
  for (uint8_t v : train) sum += v, sum_sq += double(v) * v;
  double mean = sum / train.size(), sd = std::sqrt(sum_sq / train.size() - mean * mean);
  BOOST_TEST(double(summary.mean) == mean / 255, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(double(summary.std) == sd / 255, boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(bad_options_name_option_and_value_and_write_nothing) {
  std::string dir = temp_dir("fibbad");
  std::string out = dir + "/out";
  std::string blocker = dir + "/plain";
  { std::ofstream(blocker) << "x"; }
  // The counts past the cap go to an output that cannot be created: they are refused before the
  // output is touched, and a regression fails at once instead of writing for hours.
  const std::string unwritable = blocker + "/sub";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--output", out, "--count", "0", "--seed", "1"}, "--count 0: must be at least 1"},
      {{"--output", out, "--count", "-5", "--seed", "1"}, "--count -5: must be at least 1"},
      {{"--output", unwritable, "--count", "100000001", "--seed", "1"},
       "--count 100000001: must be at most 100000000 (write a larger set as several runs, each "
       "with its own --seed and --output)"},
      {{"--output", unwritable, "--count", "9223372036854775807", "--seed", "1"},
       "--count 9223372036854775807: must be at most 100000000 (write a larger set as several "
       "runs, each with its own --seed and --output)"},
      {{"--output", out, "--count", "10", "--seed", "1", "--size", "100"},
       "--size 100: must be 64, 128 or 256"},
      {{"--output", out, "--count", "10", "--seed", "1", "--fiber-type", "om3"},
       "--fiber-type om3: must be sm-upc, sm-apc, mm-upc or mixed"},
      {{"--output", out, "--count", "10", "--seed", "-1"},
       "--seed -1: must be an integer in [0, 2^64)"},
      {{"--output", out, "--count", "10", "--seed", "1", "--threads", "0"},
       "--threads 0: must be at least 1"},
      {{"--output", out, "--count", "10", "--seed", "1", "--val-fraction", "1.5"},
       "--val-fraction 1.5: must be in [0, 1)"},
      {{"--output", out, "--count", "20", "--seed", "1", "--shards", "4"},
       "--shards 4: the val split has only 2 images (every shard needs one; raise --count or lower "
       "--shards)"},
      {{"--count", "10", "--seed", "1"}, "--output is required (the directory for the shards)"},
      {{"--output", blocker + "/sub", "--count", "10", "--seed", "1"},
       "--output " + blocker + "/sub: cannot create directory (Not a directory)"},
  };
  for (const auto& [args, message] : cases) BOOST_TEST_CONTEXT(message) {
      std::string err;
      BOOST_TEST(run(args, &err) == 2);
      BOOST_TEST(err == "rt-fibergen: error: " + message + "\n");
      BOOST_TEST(!fs::exists(out));
    }
  std::string err;
  BOOST_TEST(run({"--output", out, "--count", "10", "--seed", "1", "--bogus"}, &err) == 2);
  BOOST_TEST(err.rfind("rt-fibergen: error: unrecognised option '--bogus'", 0) == 0);
  BOOST_TEST(std::count(err.begin(), err.end(), '\n') == 1);
  BOOST_TEST(!fs::exists(out));
}

BOOST_AUTO_TEST_CASE(count_beyond_free_disk_space_is_refused) {
  std::string dir = temp_dir("fibdisk");
  // An output that cannot be created (a regular file's child): the free space is checked before
  // the output is touched, and a regression fails at once instead of writing for hours.
  std::string blocker = dir + "/plain";
  { std::ofstream(blocker) << "x"; }
  std::string out = blocker + "/out";
  // 10^8 images of 256 x 256 need 6.0 TiB (and 15 label bytes each).
  const double needed = 1e8 * (256.0 * 256 + 15);
  if (double(fs::space(dir).available) >= needed) {
    BOOST_TEST_MESSAGE("skipped: " << dir << " has 6 TiB free");
    return;
  }
  std::string err;
  BOOST_TEST(run({"--output", out, "--count", "100000000", "--seed", "1", "--size", "256"}, &err) ==
             2);
  const std::string head =
      "rt-fibergen: error: --count 100000000: the shards need about 6104.9 GiB but --output " +
      out + " has ";
  const std::string tail = " GiB free (lower --count or --size, or choose another --output)\n";
  BOOST_TEST(err.rfind(head, 0) == 0, err);
  BOOST_TEST((err.size() > tail.size() && err.substr(err.size() - tail.size()) == tail), err);
  BOOST_TEST(std::count(err.begin(), err.end(), '\n') == 1);
  BOOST_TEST(!fs::exists(out));
}

// A stop signal seen at the stop_signal poll number `at` (1-based): the shards are built in
// memory (h5::AtomicFile), so the directory holds no shard and no temp file at that moment,
// and nothing after the run gave up.
void check_stop_removes_temp_files(int64_t count, int at, int signal) {
  std::string dir = temp_dir("fibstop");
  DatasetOptions o = small_dataset(dir, 1, 5);
  o.count = count;
  o.threads = 1;
  int polls = 0;
  bool empty_at_stop = false;
  o.stop_signal = [&] {
    if (++polls < at) return 0;
    empty_at_stop = !fs::exists(dir) || fs::is_empty(dir);
    return signal;
  };
  try {
    generate_dataset(o, nullptr);
    BOOST_ERROR("generate_dataset did not stop");
  } catch (const Stopped& e) {
    BOOST_TEST(e.signal() == signal);
    BOOST_TEST(std::string(e.what()) == std::string("stopped by ") +
                                            (signal == SIGTERM ? "SIGTERM" : "SIGINT") +
                                            " before the shards were committed (no shard written)");
  }
  BOOST_TEST(polls == at);
  BOOST_TEST(empty_at_stop);
  BOOST_TEST((!fs::exists(dir) || fs::is_empty(dir)));
}

BOOST_AUTO_TEST_CASE(stop_signal_mid_split_removes_temp_files) {
  // 1600 train images: blocks of 512 start at polls 1-4; the stop comes after one block.
  check_stop_removes_temp_files(2000, 2, SIGTERM);
}

BOOST_AUTO_TEST_CASE(stop_signal_before_commit_removes_every_temp_file) {
  // 60 images: one block per split (polls 1-3), then the poll before the commit.
  check_stop_removes_temp_files(60, 4, SIGINT);
}

BOOST_AUTO_TEST_SUITE_END()
