// acceptance.cpp — the IEC 61300-3-35 acceptance tables as data, and the verdict they give.
#include "ringtrain/fiber/acceptance.hpp"

#include <limits>

#include "ringtrain/core/error.hpp"

namespace ringtrain::fiber {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The phrases the standard's tables use, as limits. Each bound is inclusive or exclusive exactly
// as the phrase says: "<= 3" admits 3, "< 2" does not admit 2, "none > 5" admits 5,
// "none >= 10" does not admit 10; a range "2-5" runs from the free bound (inclusive, since "< 2"
// left 2 out) to the counted bound (inclusive, since only "> 5" fails).
constexpr SizeLimit kNone{{0, false}, 0, {0, false}};
constexpr SizeLimit kNoLimit{{kInf, true}, 0, {kInf, true}};
// "any <= um; none > um"
constexpr SizeLimit any_up_to(double um) {
  return {{um, true}, 0, {um, true}};
}
// "max_counted <= um" (none larger): nothing is free, every defect counts
constexpr SizeLimit count_up_to(int max_counted, double um) {
  return {{0, false}, max_counted, {um, true}};
}
// "any < free_um; max_counted of free_um-counted_um; none > counted_um"
constexpr SizeLimit counted(double free_um, int max_counted, double counted_um) {
  return {{free_um, false}, max_counted, {counted_um, true}};
}
// "none >= um"
constexpr SizeLimit none_from(double um) {
  return {{um, false}, 0, {um, false}};
}

// IEC 61300-3-35:2015, one table per fiber type (zones by diameter, sizes in um), row for row
// as FIBER.md reproduces it. Single-mode PC (UPC, RL >= 45 dB) and angle-polished (APC,
// RL >= 60 dB) differ in scratches only: APC allows 4 scratches <= 3 um in the core (some
// sources: none; we follow the table) and no scratch limit in the cladding.
constexpr std::array<ZoneRule, kZones> kSmUpcRules{{
    {kNone, kNone, false},                    // A core 0-25
    {any_up_to(3), counted(2, 5, 5), false},  // B cladding 25-115
    {kNoLimit, kNoLimit, true},               // C adhesive 115-135
    {kNoLimit, none_from(10), true},          // D contact 135-250
}};
constexpr std::array<ZoneRule, kZones> kSmApcRules{{
    {count_up_to(4, 3), kNone, false},    // A core 0-25
    {kNoLimit, counted(2, 5, 5), false},  // B cladding 25-115
    {kNoLimit, kNoLimit, true},           // C adhesive 115-135
    {kNoLimit, none_from(10), true},      // D contact 135-250
}};
constexpr std::array<ZoneRule, kZones> kMmUpcRules{{
    {any_up_to(3), count_up_to(4, 5), false},  // A core 0-65
    {any_up_to(5), counted(5, 5, 10), false},  // B cladding 65-115
    {kNoLimit, kNoLimit, true},                // C adhesive 115-135
    {kNoLimit, counted(20, 5, 30), true},      // D contact 135-250
}};

const AcceptanceTable kSmUpc{FiberType::kSmUpc, {0, 25, 115, 135, 250}, kSmUpcRules, 9, 125};
const AcceptanceTable kSmApc{FiberType::kSmApc, {0, 25, 115, 135, 250}, kSmApcRules, 9, 125};
const AcceptanceTable kMmUpc{FiberType::kMmUpc, {0, 65, 115, 135, 250}, kMmUpcRules, 50, 125};

// Tallies one zone's counted sizes against its limit; false once the zone fails.
struct LimitCheck {
  const SizeLimit& limit;
  int counted = 0;
  bool admit(double size) {
    if (limit.free.admits(size)) return true;
    if (!limit.counted.admits(size)) return false;
    return ++counted <= limit.max_counted;
  }
};

bool is_linear(DefectKind kind) {
  return kind == DefectKind::kScratch || kind == DefectKind::kLint;
}

}  // namespace

const char* fiber_type_name(FiberType type) {
  switch (type) {
    case FiberType::kSmUpc:
      return "sm-upc";
    case FiberType::kSmApc:
      return "sm-apc";
    case FiberType::kMmUpc:
      return "mm-upc";
  }
  return "?";
}

const char* defect_kind_name(DefectKind kind) {
  switch (kind) {
    case DefectKind::kScratch:
      return "scratch";
    case DefectKind::kPit:
      return "pit";
    case DefectKind::kChip:
      return "chip";
    case DefectKind::kCrack:
      return "crack";
    case DefectKind::kDust:
      return "dust";
    case DefectKind::kLint:
      return "lint";
    case DefectKind::kOilFilm:
      return "oil_film";
  }
  return "?";
}

const std::vector<std::string>& class_names() {
  static const std::vector<std::string> names{"clean", "scratch", "contamination", "chip_pit",
                                              "crack"};
  return names;
}

int class_severity(int cls) {
  static constexpr int kSeverity[kClasses] = {0, 2, 1, 3, 4};
  RT_CHECK(cls >= 0 && cls < kClasses, "class ", cls, " out of range");
  return kSeverity[cls];
}

int defect_class(DefectKind kind) {
  switch (kind) {
    case DefectKind::kScratch:
      return kScratch;
    case DefectKind::kPit:
    case DefectKind::kChip:
      return kChipPit;
    case DefectKind::kCrack:
      return kCrack;
    case DefectKind::kDust:
    case DefectKind::kLint:
    case DefectKind::kOilFilm:
      return kContamination;
  }
  return kClean;
}

const AcceptanceTable& acceptance_table(FiberType type) {
  switch (type) {
    case FiberType::kSmUpc:
      return kSmUpc;
    case FiberType::kSmApc:
      return kSmApc;
    case FiberType::kMmUpc:
      return kMmUpc;
  }
  throw Error(str("fiber type ", int(type), " has no acceptance table"));
}

unsigned zones_touched(const AcceptanceTable& table, double r_min_um, double r_max_um) {
  unsigned mask = 0;
  for (int z = 0; z < kZones; ++z) {
    double inner = table.zone_diameter_um[z] / 2, outer = table.zone_diameter_um[z + 1] / 2;
    if (r_max_um >= inner && r_min_um < outer) mask |= 1u << z;
  }
  return mask;
}

Verdict judge(const AcceptanceTable& table, const std::vector<Defect>& defects) {
  Verdict verdict;
  for (int z = 0; z < kZones; ++z) {
    const ZoneRule& rule = table.zones[z];
    LimitCheck scratches{rule.scratches}, areas{rule.defects};
    bool ok = true;
    for (const Defect& d : defects) {
      if (!(zones_touched(table, d.r_min_um, d.r_max_um) & (1u << z))) continue;
      if (d.kind == DefectKind::kCrack)
        ok = ok && rule.cracks_allowed;
      else if (is_linear(d.kind))
        ok = scratches.admit(d.size_um) && ok;
      else
        ok = areas.admit(d.size_um) && ok;
    }
    verdict.zone_pass[z] = ok;
    verdict.pass = verdict.pass && ok;
  }
  return verdict;
}

}  // namespace ringtrain::fiber
