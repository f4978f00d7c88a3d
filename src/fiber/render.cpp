// render.cpp — one synthetic end face: the scene (ferrule, cladding, epoxy ring, core), the
// defects planned in micrometres and painted with the optics' blur, then the camera (defocus,
// vignetting, tilt shadow, gain, noise, gamma) and the area-average downsample.
//
// Every defect is first planned (geometry, contrast, the Defect record the labels come from)
// and only then painted, so the labels describe exactly what is drawn.
#include "ringtrain/fiber/render.hpp"

#include <algorithm>
#include <cmath>

#include "ringtrain/core/error.hpp"
#include "ringtrain/fiber/rng.hpp"

namespace ringtrain::fiber {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kPsfUm = 1.3;  // the microscope's blur: a 0.5 um scratch still shows ~1.4 um wide
constexpr double kCladdingRadiusUm = 62.5;
constexpr int kN = kRenderSize;

struct Vec2 {
  double x, y;
};
Vec2 operator+(Vec2 a, Vec2 b) {
  return {a.x + b.x, a.y + b.y};
}
Vec2 operator-(Vec2 a, Vec2 b) {
  return {a.x - b.x, a.y - b.y};
}
Vec2 operator*(double s, Vec2 a) {
  return {s * a.x, s * a.y};
}
double dot(Vec2 a, Vec2 b) {
  return a.x * b.x + a.y * b.y;
}
double norm(Vec2 a) {
  return std::sqrt(dot(a, a));
}
Vec2 polar(double r, double angle) {
  return {r * std::cos(angle), r * std::sin(angle)};
}

double segment_distance(Vec2 p, Vec2 a, Vec2 b) {
  Vec2 ab = b - a;
  double len2 = dot(ab, ab);
  double t = len2 > 0 ? std::clamp(dot(p - a, ab) / len2, 0.0, 1.0) : 0.0;
  return norm(p - (a + t * ab));
}

// A point uniform in area over the annulus r0 <= r < r1 around the fiber centre.
Vec2 random_point(Rng& rng, double r0, double r1) {
  double r = std::sqrt(rng.uniform(r0 * r0, r1 * r1));
  return polar(r, rng.uniform(0, 2 * kPi));
}

// ---- what gets painted ----------------------------------------------------------------------

// One paintable shape in fiber-centred micrometres. Pixels move toward `target` by
// alpha * coverage, where coverage is a Gaussian across a stroke or a soft-edged fill.
struct Feature {
  enum Shape { kStroke, kClosedStroke, kPolygon, kDisk } shape;
  std::vector<Vec2> points;  // stroke/polygon vertices; a disk's centre
  double radius_um = 0;      // disk radius
  double soft_um = 0;        // stroke: Gaussian sigma; fill: edge width
  float target = 0;
  float alpha = 1;
};

// The radial extent [r_min, r_max] of a feature, for the zone it lies in.
void radial_extent(const Feature& f, double* r_min, double* r_max) {
  const Vec2 origin{0, 0};
  if (f.shape == Feature::kDisk) {
    double d = norm(f.points[0]);
    *r_min = std::max(0.0, d - f.radius_um);
    *r_max = d + f.radius_um;
    return;
  }
  double lo = 1e30, hi = 0;
  size_t n = f.points.size();
  bool closed = f.shape != Feature::kStroke;
  for (size_t i = 0; i < n; ++i) {
    hi = std::max(hi, norm(f.points[i]));
    if (i + 1 < n || (closed && n > 2))
      lo = std::min(lo, segment_distance(origin, f.points[i], f.points[(i + 1) % n]));
  }
  if (n == 1) lo = norm(f.points[0]);
  double half_width = f.shape == Feature::kPolygon ? 0 : 1.1774 * f.soft_um;  // FWHM / 2
  *r_min = std::max(0.0, lo - half_width);
  *r_max = hi + half_width;
  // A fill that contains the centre reaches radius 0.
  if (f.shape == Feature::kPolygon) {
    bool inside = false;
    for (size_t i = 0, j = n - 1; i < n; j = i++) {
      const Vec2 &a = f.points[i], &b = f.points[j];
      if ((a.y > 0) != (b.y > 0) && 0 < (b.x - a.x) * (0 - a.y) / (b.y - a.y) + a.x)
        inside = !inside;
    }
    if (inside) *r_min = 0;
  }
}

// A defect: its record for the labels and the features that draw it.
struct PlannedDefect {
  Defect record;
  std::vector<Feature> features;
};

// ---- the scene ------------------------------------------------------------------------------

struct Scene {
  FiberType type;
  const AcceptanceTable* table;
  double cx, cy;  // fiber centre, pixels
  float ferrule, cladding, epoxy, core;
  double epoxy_width_um, core_radius_um;
  std::array<float, 81> texture;  // 9x9 low-frequency ferrule mottling
  double apc_tilt;                // APC: brightness slope across the field
};

Scene plan_scene(Rng& rng, FiberType type) {
  Scene s{};
  s.type = type;
  s.table = &acceptance_table(type);
  double max_offset = 0.08 * kN / 2;
  s.cx = kN / 2.0 + rng.uniform(-max_offset, max_offset);
  s.cy = kN / 2.0 + rng.uniform(-max_offset, max_offset);
  s.ferrule = float(rng.uniform(0.72, 0.88));
  s.cladding = float(rng.uniform(0.30, 0.46));
  s.epoxy = float(rng.uniform(0.06, 0.18));
  s.epoxy_width_um = rng.uniform(1.5, 4.0);
  s.core_radius_um = s.table->core_diameter_um / 2;
  bool lit = rng.chance(0.35);
  s.core = lit ? float(rng.uniform(0.80, 0.98)) : s.cladding * float(rng.uniform(1.0, 1.06));
  for (float& t : s.texture) t = float(rng.uniform(-0.05, 0.05));
  s.apc_tilt = type == FiberType::kSmApc ? rng.uniform(-0.06, 0.06) : 0.0;
  return s;
}

float clamp01(double v) {
  return float(std::min(1.0, std::max(0.0, v)));
}

// Soft coverage of "inside radius r" at distance d, with an edge `edge` wide.
float disk_coverage(float d, float r, float edge) {
  return std::min(1.0f, std::max(0.0f, 0.5f + (r - d) / edge));
}

// The scene, one row at a time: per-column terms are computed once, so each pixel costs one
// square root and a few multiply-adds (the ring's exp only in its narrow band).
void paint_scene(const Scene& s, std::vector<float>& img) {
  const float um = float(kRenderUmPerPixel), edge = float(kPsfUm);
  const float ring_inv_sigma = float(2.355 / s.epoxy_width_um);
  const float ring_centre = float(kCladdingRadiusUm + s.epoxy_width_um / 2);
  const float clad_r = float(kCladdingRadiusUm), core_r = float(s.core_radius_um);
  std::array<float, kN> ux2, column_light, tex_fx;
  std::array<int, kN> tex_ix;
  for (int x = 0; x < kN; ++x) {
    float ux = (x + 0.5f - float(s.cx)) * um;
    ux2[x] = ux * ux;
    column_light[x] = s.ferrule * float(1 + s.apc_tilt * (x - kN / 2.0) / (kN / 2.0));
    float gx = x * 8.0f / (kN - 1);
    tex_ix[x] = std::min(int(gx), 7);
    tex_fx[x] = gx - tex_ix[x];
  }
  for (int y = 0; y < kN; ++y) {
    float uy = (y + 0.5f - float(s.cy)) * um, uy2 = uy * uy;
    float gy = y * 8.0f / (kN - 1);
    int iy = std::min(int(gy), 7);
    float fy = gy - iy;
    std::array<float, 9> tex_row;
    for (int k = 0; k < 9; ++k)
      tex_row[k] = s.texture[iy * 9 + k] * (1 - fy) + s.texture[(iy + 1) * 9 + k] * fy;
    float* row = &img[size_t(y) * kN];
    for (int x = 0; x < kN; ++x) {
      float d2 = ux2[x] + uy2, d = std::sqrt(d2);
      float tex = tex_row[tex_ix[x]] * (1 - tex_fx[x]) + tex_row[tex_ix[x] + 1] * tex_fx[x];
      float ferrule = column_light[x] * (1 + tex);
      float glass = s.cladding * (1 + 0.06f * (1 - std::min(1.0f, d2 / 3906.25f)));
      glass += disk_coverage(d, core_r, edge) * (s.core - glass);
      float v = ferrule + disk_coverage(d, clad_r, edge) * (glass - ferrule);
      float rd = (d - ring_centre) * ring_inv_sigma;
      if (rd * rd < 16) v += std::exp(-0.5f * rd * rd) * (s.epoxy - v);
      row[x] = v;
    }
  }
}

// ---- painting features ----------------------------------------------------------------------

// A coverage buffer over the frame; paints take the maximum so overlapping segments of one
// stroke do not darken twice; apply() blends and clears only the touched box.
class Coverage {
 public:
  Coverage() : a_(kN * kN, 0.0f) {}
  void touch(int x0, int y0, int x1, int y1) {
    bx0_ = std::min(bx0_, x0), by0_ = std::min(by0_, y0);
    bx1_ = std::max(bx1_, x1), by1_ = std::max(by1_, y1);
  }
  float& at(int x, int y) { return a_[y * kN + x]; }
  void apply(std::vector<float>& img, float target, float alpha) {
    for (int y = by0_; y < by1_; ++y)
      for (int x = bx0_; x < bx1_; ++x) {
        float& m = a_[y * kN + x];
        if (m > 0) img[y * kN + x] += alpha * m * (target - img[y * kN + x]);
        m = 0;
      }
    bx0_ = by0_ = kN;
    bx1_ = by1_ = 0;
  }

 private:
  std::vector<float> a_;
  int bx0_ = kN, by0_ = kN, bx1_ = 0, by1_ = 0;
};

struct Box {
  int x0, y0, x1, y1;
  bool empty() const { return x0 >= x1 || y0 >= y1; }
};

Box pixel_box(double xmin, double ymin, double xmax, double ymax) {
  return {std::max(0, int(std::floor(xmin))), std::max(0, int(std::floor(ymin))),
          std::min(kN, int(std::ceil(xmax)) + 1), std::min(kN, int(std::ceil(ymax)) + 1)};
}

class Painter {
 public:
  Painter(const Scene& s, std::vector<float>& img) : s_(s), img_(img) {}

  void paint(const Feature& f) {
    std::vector<Vec2> p;
    for (Vec2 u : f.points) p.push_back(to_pixels(u));
    switch (f.shape) {
      case Feature::kStroke:
      case Feature::kClosedStroke:
        stroke(p, f.shape == Feature::kClosedStroke, f.soft_um);
        break;
      case Feature::kPolygon:
        polygon(p, f.soft_um);
        break;
      case Feature::kDisk:
        disk(p[0], f.radius_um, f.soft_um);
        break;
    }
    cov_.apply(img_, f.target, f.alpha);
  }

 private:
  Vec2 to_pixels(Vec2 u) const {
    return {s_.cx + u.x / kRenderUmPerPixel, s_.cy + u.y / kRenderUmPerPixel};
  }

  void stroke(const std::vector<Vec2>& p, bool closed, double sigma_um) {
    double sigma = std::max(0.35, sigma_um / kRenderUmPerPixel);
    double reach = 3 * sigma, inv = 1 / (2 * sigma * sigma);
    size_t n = p.size(), segments = closed ? n : n - 1;
    for (size_t i = 0; i < segments; ++i) {
      Vec2 a = p[i], b = p[(i + 1) % n];
      Box box = pixel_box(std::min(a.x, b.x) - reach, std::min(a.y, b.y) - reach,
                          std::max(a.x, b.x) + reach, std::max(a.y, b.y) + reach);
      if (box.empty()) continue;
      cov_.touch(box.x0, box.y0, box.x1, box.y1);
      for (int y = box.y0; y < box.y1; ++y)
        for (int x = box.x0; x < box.x1; ++x) {
          double d = segment_distance({x + 0.5, y + 0.5}, a, b);
          if (d > reach) continue;
          float& m = cov_.at(x, y);
          m = std::max(m, float(std::exp(-d * d * inv)));
        }
    }
  }

  void polygon(const std::vector<Vec2>& p, double edge_um) {
    double edge = std::max(0.7, edge_um / kRenderUmPerPixel);
    double xmin = 1e30, ymin = 1e30, xmax = -1e30, ymax = -1e30;
    for (Vec2 v : p) {
      xmin = std::min(xmin, v.x), xmax = std::max(xmax, v.x);
      ymin = std::min(ymin, v.y), ymax = std::max(ymax, v.y);
    }
    Box box = pixel_box(xmin - edge, ymin - edge, xmax + edge, ymax + edge);
    if (box.empty()) return;
    cov_.touch(box.x0, box.y0, box.x1, box.y1);
    size_t n = p.size();
    for (int y = box.y0; y < box.y1; ++y)
      for (int x = box.x0; x < box.x1; ++x) {
        Vec2 q{x + 0.5, y + 0.5};
        bool inside = false;
        double d = 1e30;
        for (size_t i = 0, j = n - 1; i < n; j = i++) {
          const Vec2 &a = p[i], &b = p[j];
          if ((a.y > q.y) != (b.y > q.y) && q.x < (b.x - a.x) * (q.y - a.y) / (b.y - a.y) + a.x)
            inside = !inside;
          d = std::min(d, segment_distance(q, a, b));
        }
        float c = clamp01(0.5 + (inside ? d : -d) / edge);
        if (c > 0) cov_.at(x, y) = std::max(cov_.at(x, y), c);
      }
  }

  void disk(Vec2 c, double radius_um, double edge_um) {
    double r = radius_um / kRenderUmPerPixel, edge = std::max(0.7, edge_um / kRenderUmPerPixel);
    Box box = pixel_box(c.x - r - edge, c.y - r - edge, c.x + r + edge, c.y + r + edge);
    if (box.empty()) return;
    cov_.touch(box.x0, box.y0, box.x1, box.y1);
    for (int y = box.y0; y < box.y1; ++y)
      for (int x = box.x0; x < box.x1; ++x) {
        float v = disk_coverage(norm(Vec2{x + 0.5, y + 0.5} - c), r, edge);
        if (v > 0) cov_.at(x, y) = std::max(cov_.at(x, y), v);
      }
  }

  const Scene& s_;
  std::vector<float>& img_;
  Coverage cov_;
};

// ---- planning defects -------------------------------------------------------------------------

// The Gaussian sigma that shows a feature `width_um` wide through the microscope's optics.
double stroke_sigma(double width_um) {
  return std::sqrt(width_um * width_um + kPsfUm * kPsfUm) / 2.355;
}

PlannedDefect finish(DefectKind kind, double size_um, std::vector<Feature> features) {
  PlannedDefect d{{kind, size_um, 1e30, 0}, std::move(features)};
  for (const Feature& f : d.features) {
    double lo, hi;
    radial_extent(f, &lo, &hi);
    d.record.r_min_um = std::min(d.record.r_min_um, lo);
    d.record.r_max_um = std::max(d.record.r_max_um, hi);
  }
  return d;
}

// A chord, straight or slightly bowed, bright or dark.
PlannedDefect plan_scratch(Rng& rng, double max_width = 6, double max_length = 250) {
  double width = 0.5 + (max_width - 0.5) * std::pow(rng.uniform(), 1.5);  // thin ones commoner
  // Long ones commoner: they show at 64 px.
  double length = 30 + (max_length - 30) * std::sqrt(rng.uniform());
  double offset = rng.uniform(0, 50), heading = rng.uniform(0, 2 * kPi);
  Vec2 along = polar(1, heading), across{-along.y, along.x};
  double shift = rng.uniform(-0.25, 0.25) * length;
  double bow = rng.chance(0.5) ? rng.uniform(-0.06, 0.06) * length : 0.0;
  Feature f{Feature::kStroke, {}, 0, stroke_sigma(width), 0, 0};
  constexpr int kSegments = 12;
  for (int i = 0; i <= kSegments; ++i) {
    double t = 2.0 * i / kSegments - 1;
    f.points.push_back(offset * across + (shift + t * length / 2) * along +
                       bow * (1 - t * t) * across);
  }
  double strength = width < 1.5 ? rng.uniform(0.65, 0.9) : rng.uniform(0.55, 0.8);
  bool bright = rng.chance(0.35);
  f.target = bright ? 1.0f : 0.0f;
  f.alpha = float(bright ? strength * 0.8 : strength);
  return finish(DefectKind::kScratch, width, {f});
}

// A compact dark spot in the glass, sometimes with a bright rim.
PlannedDefect plan_pit(Rng& rng, double min_um, double max_um = 12) {
  double size = rng.uniform(min_um, max_um);
  Vec2 c = random_point(rng, 0, 52);
  std::vector<Feature> fs{{Feature::kDisk,
                           {c},
                           size / 2,
                           kPsfUm,
                           float(rng.uniform(0.02, 0.1)),
                           float(rng.uniform(0.85, 1.0))}};
  if (rng.chance(0.6))
    fs.push_back({Feature::kDisk, {c}, size / 2 + 1.0, kPsfUm, 1.0f, float(rng.uniform(0.4, 0.7))});
  // Paint the rim first so the dark centre covers its inside.
  std::reverse(fs.begin(), fs.end());
  return finish(DefectKind::kPit, size, fs);
}

// A jagged bite out of the cladding edge.
PlannedDefect plan_chip(Rng& rng, double min_um, double max_um = 30) {
  double size = rng.uniform(min_um, max_um);
  double angle = rng.uniform(0, 2 * kPi);
  Vec2 c = polar(kCladdingRadiusUm - 0.3 * size, angle);
  double limit = kCladdingRadiusUm + 1.0;
  Feature f{Feature::kPolygon,
            {},
            0,
            kPsfUm,
            float(rng.uniform(0.03, 0.12)),
            float(rng.uniform(0.85, 1.0))};
  const int n = rng.between(12, 18);
  for (int k = 0; k < n; ++k) {
    double phi = 2 * kPi * (k + rng.uniform(-0.3, 0.3)) / n;
    Vec2 v = c + polar(size / 2 * rng.uniform(0.45, 1.0), phi);
    double r = norm(v);
    if (r > limit) v = (limit / r) * v;  // the bite stops at the glass edge
    f.points.push_back(v);
  }
  return finish(DefectKind::kChip, size, {f});
}

// A jagged polyline from `start` heading `heading`, stopping inside the glass.
std::vector<Vec2> jagged_path(Rng& rng, Vec2 start, double heading, double length) {
  std::vector<Vec2> path{start};
  double walked = 0, drift = 0;
  while (walked < length) {
    double step = rng.uniform(4, 9);
    drift = 0.5 * drift + rng.uniform(-0.6, 0.6);
    Vec2 next = path.back() + polar(step, heading + drift);
    if (norm(next) > kCladdingRadiusUm - 1) break;
    path.push_back(next);
    walked += step;
  }
  if (path.size() < 2) path.push_back(start + polar(3, heading));
  return path;
}

// A branching jagged crack, radial from the edge or the centre, or a shattered star.
PlannedDefect plan_crack(Rng& rng) {
  double width = rng.uniform(0.5, 2.0);
  float target = float(rng.uniform(0.0, 0.04)), alpha = float(rng.uniform(0.85, 0.97));
  auto stroke = [&](std::vector<Vec2> path) {
    return Feature{Feature::kStroke, std::move(path), 0, stroke_sigma(width), target, alpha};
  };
  std::vector<Feature> fs;
  if (rng.chance(0.35)) {  // shattered: a star of rays from one point
    Vec2 c = random_point(rng, 0, 30);
    int rays = rng.between(5, 9);
    double turn = rng.uniform(0, 2 * kPi);
    for (int k = 0; k < rays; ++k)
      fs.push_back(stroke(jagged_path(
          rng, c, turn + 2 * kPi * (k + rng.uniform(-0.25, 0.25)) / rays, rng.uniform(18, 55))));
  } else {
    double angle = rng.uniform(0, 2 * kPi);
    bool from_edge = rng.chance(0.6);
    Vec2 start = from_edge ? polar(kCladdingRadiusUm - 2, angle) : random_point(rng, 0, 15);
    double heading = from_edge ? angle + kPi + rng.uniform(-0.35, 0.35) : angle;
    std::vector<Vec2> main = jagged_path(rng, start, heading, rng.uniform(45, 110));
    int branches = rng.between(1, 3);
    for (int b = 0; b < branches && main.size() > 2; ++b) {
      const Vec2& from = main[1 + rng.below(int(main.size()) - 2)];
      double side = rng.chance(0.5) ? 1 : -1;
      fs.push_back(stroke(
          jagged_path(rng, from, heading + side * rng.uniform(0.4, 1.0), rng.uniform(12, 40))));
    }
    fs.insert(fs.begin(), stroke(std::move(main)));
  }
  return finish(DefectKind::kCrack, width, fs);
}

// An irregular particle anywhere over zones A-D.
PlannedDefect plan_dust(Rng& rng, double min_um, double max_um) {
  double size = rng.uniform(min_um, max_um);
  Vec2 c = random_point(rng, 0, 110);
  // Grey rather than black: on the glass a particle shows less than a pit does.
  float target = float(rng.uniform(0.1, 0.3)), alpha = float(rng.uniform(0.55, 0.85));
  if (size < 4)
    return finish(DefectKind::kDust, size,
                  {{Feature::kDisk, {c}, size / 2, kPsfUm, target, alpha}});
  Feature f{Feature::kPolygon, {}, 0, kPsfUm, target, alpha};
  const int n = rng.between(7, 11);
  for (int k = 0; k < n; ++k)
    f.points.push_back(
        c + polar(size / 2 * rng.uniform(0.55, 1.0), 2 * kPi * (k + rng.uniform(-0.3, 0.3)) / n));
  return finish(DefectKind::kDust, size, {f});
}

// A curling fibre of lint, 2-5 um wide.
PlannedDefect plan_lint(Rng& rng) {
  double width = rng.uniform(2, 5), length = rng.uniform(40, 200);
  Vec2 p = random_point(rng, 0, 95);
  double heading = rng.uniform(0, 2 * kPi), turn = 0;
  Feature f{Feature::kStroke,
            {p},
            0,
            stroke_sigma(width),
            float(rng.uniform(0.08, 0.25)),
            float(rng.uniform(0.6, 0.85))};
  for (double walked = 0; walked < length; walked += 5) {
    turn = 0.8 * turn + rng.uniform(-0.12, 0.12);
    heading += turn;
    p = p + polar(5, heading);
    f.points.push_back(p);
  }
  return finish(DefectKind::kLint, width, {f});
}

// A faint blotch of oil (alpha 0.1-0.3) with a slightly darker rim.
PlannedDefect plan_oil_film(Rng& rng, double min_um, double max_um = 150) {
  double size = rng.uniform(min_um, max_um);
  Vec2 c = random_point(rng, 0, 70);
  float alpha = float(rng.uniform(0.1, 0.3));
  std::vector<Vec2> outline;
  double a1 = rng.uniform(0, 0.15), a2 = rng.uniform(0, 0.1), p1 = rng.uniform(0, 2 * kPi),
         p2 = rng.uniform(0, 2 * kPi);
  for (int k = 0; k < 28; ++k) {
    double phi = 2 * kPi * k / 28;
    double r = size / 2 * (1 - a1 - a2 + a1 * std::sin(2 * phi + p1) + a2 * std::sin(3 * phi + p2));
    outline.push_back(c + polar(r, phi));
  }
  Feature film{Feature::kPolygon, outline, 0, 0.12 * size, 0.05f, alpha};
  Feature rim{Feature::kClosedStroke, outline, 0, 1.5, 0.05f, alpha * 0.8f};
  return finish(DefectKind::kOilFilm, size, {film, rim});
}

// ---- which defects an image gets ----------------------------------------------------------

// The primary class's defects, drawn so the class shows at 64 x 64 (within FIBER.md's ranges).
void plan_primary(Rng& rng, int cls, std::vector<PlannedDefect>& out) {
  switch (cls) {
    case kScratch: {
      int n = rng.chance(0.3) ? 2 : 1;
      for (int i = 0; i < n; ++i) out.push_back(plan_scratch(rng));
      break;
    }
    case kContamination: {
      double style = rng.uniform();
      if (style < 0.4) {  // a scatter of dust, a few of them large
        int n = rng.between(4, 14);
        for (int i = 0; i < n; ++i) out.push_back(plan_dust(rng, i < 2 ? 8 : 1, i < 2 ? 25 : 12));
      } else if (style < 0.7) {  // lint, with some dust
        int n = rng.between(1, 2), dust = rng.between(0, 3);
        for (int i = 0; i < n; ++i) out.push_back(plan_lint(rng));
        for (int i = 0; i < dust; ++i) out.push_back(plan_dust(rng, 1, 10));
      } else {  // an oil film, which collects dust
        out.push_back(plan_oil_film(rng, 40));
        int dust = rng.between(1, 4);
        for (int i = 0; i < dust; ++i) out.push_back(plan_dust(rng, 1, 10));
      }
      break;
    }
    case kChipPit: {
      if (rng.chance(0.5)) {
        out.push_back(plan_chip(rng, 14));
      } else {
        int n = rng.between(1, 4);  // pitting: the first two big enough to show at 64 px
        for (int i = 0; i < n; ++i) out.push_back(plan_pit(rng, i < 2 ? 6 : 1));
      }
      break;
    }
    case kCrack:
      out.push_back(plan_crack(rng));
      break;
    default:
      break;
  }
}

// Sometimes a lesser defect: of a less severe class than the primary, and smaller.
void plan_secondary(Rng& rng, int primary, std::vector<PlannedDefect>& out) {
  std::vector<int> lesser;
  for (int c = 1; c < kClasses; ++c)
    if (class_severity(c) < class_severity(primary)) lesser.push_back(c);
  if (lesser.empty() || !rng.chance(0.25)) return;
  // Lesser in size too (inside FIBER.md's ranges), so the primary class stays the one that shows.
  switch (lesser[rng.below(int(lesser.size()))]) {
    case kScratch:
      out.push_back(plan_scratch(rng, 2, 90));
      break;
    case kChipPit:
      out.push_back(rng.chance(0.5) ? plan_chip(rng, 5, 12) : plan_pit(rng, 1, 5));
      break;
    case kContamination: {
      if (rng.chance(0.2)) {
        out.push_back(plan_oil_film(rng, 20, 60));
      } else {
        int n = rng.between(1, 3);
        for (int i = 0; i < n; ++i) out.push_back(plan_dust(rng, 1, 5));
      }
      break;
    }
    default:
      break;
  }
}

// ---- the camera ---------------------------------------------------------------------------

struct Capture {
  double blur_sigma_px;
  double vignette, vig_cx, vig_cy;
  bool tilt;
  double tilt_strength, tilt_dx, tilt_dy;  // shadow crescent: cladding minus a shifted copy
  double gain, gamma, noise;
};

Capture plan_capture(Rng& rng) {
  Capture c{};
  c.blur_sigma_px = rng.uniform(0, 1.5);
  c.vignette = rng.uniform(0.1, 0.3);
  c.vig_cx = kN / 2.0 + rng.uniform(-20, 20);
  c.vig_cy = kN / 2.0 + rng.uniform(-20, 20);
  c.tilt = rng.chance(0.3);
  c.tilt_strength = rng.uniform(0.15, 0.35);
  Vec2 shift = polar(rng.uniform(4, 10), rng.uniform(0, 2 * kPi));
  c.tilt_dx = shift.x, c.tilt_dy = shift.y;
  c.gain = rng.uniform(0.8, 1.2);
  c.gamma = rng.uniform(0.8, 1.2);
  c.noise = rng.uniform(0.01, 0.03);
  return c;
}

// Separable Gaussian blur, edges clamped: rows through a padded copy, columns as whole-row
// multiply-adds (both vectorise).
void blur(std::vector<float>& img, double sigma) {
  if (sigma < 0.25) return;
  const int radius = int(std::ceil(3 * sigma));
  std::vector<float> k(2 * radius + 1);
  float total = 0;
  for (int i = -radius; i <= radius; ++i)
    total += k[i + radius] = float(std::exp(-0.5 * i * i / (sigma * sigma)));
  for (float& w : k) w /= total;
  thread_local std::vector<float> tmp, padded;
  tmp.assign(img.size(), 0.0f);
  padded.resize(kN + 2 * radius);
  for (int y = 0; y < kN; ++y) {
    const float* src = &img[size_t(y) * kN];
    std::fill(padded.begin(), padded.begin() + radius, src[0]);
    std::copy(src, src + kN, padded.begin() + radius);
    std::fill(padded.begin() + radius + kN, padded.end(), src[kN - 1]);
    float* dst = &tmp[size_t(y) * kN];
    for (int i = 0; i <= 2 * radius; ++i)
      for (int x = 0; x < kN; ++x) dst[x] += k[i] * padded[x + i];
  }
  for (int y = 0; y < kN; ++y) {
    float* dst = &img[size_t(y) * kN];
    std::fill(dst, dst + kN, 0.0f);
    for (int i = -radius; i <= radius; ++i) {
      const float* src = &tmp[size_t(std::clamp(y + i, 0, kN - 1)) * kN];
      for (int x = 0; x < kN; ++x) dst[x] += k[i + radius] * src[x];
    }
  }
}

void expose(const Scene& s, const Capture& c, Rng& rng, std::vector<float>& img) {
  blur(img, c.blur_sigma_px);
  constexpr int kLut = 1024;
  std::array<float, kLut + 2> gamma_lut;
  for (int i = 0; i <= kLut + 1; ++i)
    gamma_lut[i] = float(std::pow(std::min(1.0, double(i) / kLut), c.gamma));
  const float corner2 = 2.0f * (kN / 2.0f) * (kN / 2.0f), um = float(kRenderUmPerPixel);
  const float gauss_var = float(0.6 * c.noise * 0.6 * c.noise);
  const float shot_scale = float(0.8 * c.noise * 0.8 * c.noise / 0.5);  // variance ∝ signal
  std::array<float, kN> vx2, ux;
  for (int x = 0; x < kN; ++x) {
    float vx = x + 0.5f - float(c.vig_cx);
    vx2[x] = vx * vx;
    ux[x] = (x + 0.5f - float(s.cx)) * um;
  }
  std::array<float, kN> factor;
  for (int y = 0; y < kN; ++y) {
    float vy = y + 0.5f - float(c.vig_cy), vy2 = vy * vy;
    for (int x = 0; x < kN; ++x)
      factor[x] = float(c.gain) * (1 - float(c.vignette) * (vx2[x] + vy2) / corner2);
    if (c.tilt) {  // a dark crescent: the cladding minus a copy shifted by the tilt
      float uy = (y + 0.5f - float(s.cy)) * um, sy = uy - float(c.tilt_dy);
      for (int x = 0; x < kN; ++x) {
        float sx = ux[x] - float(c.tilt_dx);
        float d = std::sqrt(ux[x] * ux[x] + uy * uy), ds = std::sqrt(sx * sx + sy * sy);
        float crescent = disk_coverage(d, float(kCladdingRadiusUm), 3) *
                         (1 - disk_coverage(ds, float(kCladdingRadiusUm), 6));
        factor[x] *= 1 - float(c.tilt_strength) * crescent;
      }
    }
    float* row = &img[size_t(y) * kN];
    for (int x = 0; x < kN; ++x) {
      float v = row[x] * factor[x];
      v += std::sqrt(gauss_var + shot_scale * std::max(v, 0.0f)) * rng.normal();
      float t = std::min(1.0f, std::max(0.0f, v)) * kLut;
      int i = int(t);
      row[x] = gamma_lut[i] + (t - i) * (gamma_lut[i + 1] - gamma_lut[i]);
    }
  }
}

// Area average of f x f blocks, rounded to 8 bits.
std::vector<uint8_t> downsample(const std::vector<float>& img, int size) {
  const int f = kN / size;
  const float scale = 255.0f / float(f * f);
  std::vector<uint8_t> out(size_t(size) * size);
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      float acc = 0;
      for (int j = 0; j < f; ++j)
        for (int i = 0; i < f; ++i) acc += img[(y * f + j) * kN + x * f + i];
      out[y * size + x] = uint8_t(std::min(255.0f, std::max(0.0f, acc * scale + 0.5f)));
    }
  return out;
}

FiberType pick_fiber(Rng& rng, FiberChoice choice) {
  switch (choice) {
    case FiberChoice::kSmUpc:
      return FiberType::kSmUpc;
    case FiberChoice::kSmApc:
      return FiberType::kSmApc;
    case FiberChoice::kMmUpc:
      return FiberType::kMmUpc;
    case FiberChoice::kMixed:
      break;
  }
  return FiberType(rng.below(kFiberTypes));
}

void fill_labels(int primary, const AcceptanceTable& table, Sample& s) {
  s.multi_hot.fill(0);
  s.label = kClean;
  for (const Defect& d : s.defects) {
    int cls = defect_class(d.kind);
    s.multi_hot[cls] = 1;
    if (class_severity(cls) > class_severity(s.label)) s.label = cls;
  }
  if (s.defects.empty()) s.multi_hot[kClean] = 1;
  RT_CHECK(s.label == primary, "planned primary class ", primary, " but labelled ", s.label);
  Verdict v = judge(table, s.defects);
  s.pass = v.pass;
  for (int z = 0; z < kZones; ++z) s.zone_pass[z] = v.zone_pass[z];
}

}  // namespace

const char* fiber_choice_name(FiberChoice choice) {
  switch (choice) {
    case FiberChoice::kSmUpc:
      return "sm-upc";
    case FiberChoice::kSmApc:
      return "sm-apc";
    case FiberChoice::kMmUpc:
      return "mm-upc";
    case FiberChoice::kMixed:
      return "mixed";
  }
  return "?";
}

bool parse_fiber_choice(const std::string& text, FiberChoice* out) {
  for (FiberChoice c :
       {FiberChoice::kSmUpc, FiberChoice::kSmApc, FiberChoice::kMmUpc, FiberChoice::kMixed})
    if (text == fiber_choice_name(c)) {
      *out = c;
      return true;
    }
  return false;
}

Sample render_sample(uint64_t seed, int split, uint64_t index, const RenderOptions& options) {
  RT_CHECK(options.size == 64 || options.size == 128 || options.size == 256, "render size ",
           options.size, " is not 64, 128 or 256");
  Rng rng = Rng::for_image(seed, split, index);
  Sample sample;
  sample.fiber = pick_fiber(rng, options.fiber);
  const Scene scene = plan_scene(rng, sample.fiber);
  const int primary = rng.below(kClasses);
  std::vector<PlannedDefect> planned;
  plan_primary(rng, primary, planned);
  plan_secondary(rng, primary, planned);
  const Capture capture = plan_capture(rng);

  thread_local std::vector<float> img(size_t(kN) * kN);
  paint_scene(scene, img);
  Painter painter(scene, img);
  for (const PlannedDefect& d : planned) {
    sample.defects.push_back(d.record);
    if (!options.skip_defect_painting)
      for (const Feature& f : d.features) painter.paint(f);
  }
  expose(scene, capture, rng, img);
  sample.pixels = downsample(img, options.size);
  fill_labels(primary, *scene.table, sample);
  return sample;
}

}  // namespace ringtrain::fiber
