// acceptance.hpp — IEC 61300-3-35 end-face zones and acceptance tables, one per fiber type,
// and the verdict for a list of measured defects.
//
// defines: FiberType, Zone, DefectKind, Defect, Bound, SizeLimit, ZoneRule, AcceptanceTable,
//          acceptance_table(), zones_touched(), judge(), Verdict, defect_class()
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ringtrain::fiber {

enum class FiberType : uint8_t { kSmUpc = 0, kSmApc = 1, kMmUpc = 2 };
constexpr int kFiberTypes = 3;
const char* fiber_type_name(FiberType type);  // "sm-upc", "sm-apc", "mm-upc"

enum Zone : int { kZoneA = 0, kZoneB = 1, kZoneC = 2, kZoneD = 3 };
constexpr int kZones = 4;

// What was drawn. Each kind maps to one training class and to one acceptance rule.
enum class DefectKind : uint8_t { kScratch, kPit, kChip, kCrack, kDust, kLint, kOilFilm };
const char* defect_kind_name(DefectKind kind);

// Training classes (the `label` and `multi_hot` index) and their severity order.
enum Class : int32_t { kClean = 0, kScratch = 1, kContamination = 2, kChipPit = 3, kCrack = 4 };
constexpr int kClasses = 5;
const std::vector<std::string>& class_names();  // clean, scratch, contamination, chip_pit, crack
int class_severity(int cls);  // clean 0 < contamination 1 < scratch 2 < chip_pit 3 < crack 4
int defect_class(DefectKind kind);

// One drawn defect, as an inspector would measure it: size in micrometres (width for linear
// features, enclosing diameter otherwise) and its radial extent from the fiber centre.
struct Defect {
  DefectKind kind;
  double size_um;
  double r_min_um;
  double r_max_um;
};

// A size threshold that is either "< um" or "<= um".
struct Bound {
  double um;
  bool inclusive;
  bool admits(double size) const { return inclusive ? size <= um : size < um; }
};

// "any below `free`; at most `max_counted` more up to `counted`; none above": a defect of size s
// is free when free.admits(s), counted when counted.admits(s), and fails the zone otherwise.
struct SizeLimit {
  Bound free;
  int max_counted;
  Bound counted;
};

// Linear features (scratches, lint) and area defects (pits, chips, particles, films) have their
// own limits; cracks are simply allowed or not.
struct ZoneRule {
  SizeLimit scratches;
  SizeLimit defects;
  bool cracks_allowed;
};

// One fiber type's zones (diameters in micrometres) and rules.
struct AcceptanceTable {
  FiberType type;
  std::array<double, kZones + 1> zone_diameter_um;  // A starts at [0], D ends at [4]
  std::array<ZoneRule, kZones> zones;
  double core_diameter_um;
  double cladding_diameter_um;
};

const AcceptanceTable& acceptance_table(FiberType type);

// Bit z set when the radial extent [r_min, r_max] overlaps zone z.
unsigned zones_touched(const AcceptanceTable& table, double r_min_um, double r_max_um);

struct Verdict {
  bool pass = true;
  std::array<bool, kZones> zone_pass{true, true, true, true};
};

// The IEC verdict for the defects of one end face: every defect counts in every zone it touches.
Verdict judge(const AcceptanceTable& table, const std::vector<Defect>& defects);

}  // namespace ringtrain::fiber
