// test_loader.cpp — the prefetching loader's pixels, ids, epochs and errors.
//
// Exact normalisation, augmentation pixels for known samples, ids as the sampler says,
// epochs restart cleanly, errors reach the consumer.
#include <unistd.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include "ringtrain/core/error.hpp"
#include "ringtrain/data/loader.hpp"
#include "ringtrain/data/shard/writer.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace ringtrain;
using data::Remainder;

namespace {

constexpr int kC = 3, kH = 5, kW = 6;  // not square: a transposed crop cannot pass
const std::vector<float> kMean{0.1f, 0.2f, 0.3f}, kStd{0.5f, 0.25f, 0.2f};

uint8_t pixel(int64_t id, int c, int y, int x) {
  return uint8_t((id * 17 + c * 50 + y * kW + x + 1) % 256);
}

// A split of n samples whose pixels encode id, channel and position.
std::string write_split(const std::string& name, int n, int shards) {
  const fs::path dir = rt_test::temp_root() / name;
  fs::remove_all(dir);
  data::shard::SplitImages s;
  s.dataset = "testset";
  s.split = "train";
  s.channels = kC;
  s.height = kH;
  s.width = kW;
  s.class_names = {"a", "b", "c", "d"};
  s.mean = kMean;
  s.std = kStd;
  for (int id = 0; id < n; ++id) {
    for (int c = 0; c < kC; ++c)
      for (int y = 0; y < kH; ++y)
        for (int x = 0; x < kW; ++x) s.images.push_back(pixel(id, c, y, x));
    s.labels.push_back(id % 4);
  }
  fs::create_directories(dir);
  data::shard::write_splits(dir.string(), {&s}, shards);
  return dir.string();
}

float normalised(int v, int c) {
  return float((v / 255.0 - kMean[c]) / kStd[c]);
}

// The augmented image built the long way: pad with zeros, crop, mirror, normalise.
std::vector<float> expected_augmented(int64_t id, const data::AugmentParams& p, int pad) {
  const int ph = kH + 2 * pad, pw = kW + 2 * pad;
  std::vector<float> out(kC * kH * kW);
  for (int c = 0; c < kC; ++c) {
    std::vector<int> padded(ph * pw, 0);
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x) padded[(y + pad) * pw + x + pad] = pixel(id, c, y, x);
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x) {
        const int crop_x = p.flip ? kW - 1 - x : x;
        const int v = padded[(y + pad + p.dy) * pw + crop_x + pad + p.dx];
        out[(c * kH + y) * kW + x] = normalised(v, c);
      }
  }
  return out;
}

data::LoaderOptions options(int batch, bool shuffle, bool augment, Remainder remainder) {
  data::LoaderOptions o;
  o.batch_per_rank = batch;
  o.shuffle = shuffle;
  o.augment = augment ? data::AugmentKind::kCropFlip : data::AugmentKind::kNone;
  o.remainder = remainder;
  o.seed = 11;
  o.prefetch_batches = 2;
  return o;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(loader)

BOOST_AUTO_TEST_CASE(normalises_every_pixel_and_keeps_ids_and_labels) {
  const std::string dir = write_split("load-norm", 10, 3);
  data::Loader loader(data::ShardSet::open(dir, "train"),
                      options(4, false, false, Remainder::kAll));
  BOOST_TEST(loader.steps_per_epoch() == 3);
  loader.start_epoch(0);
  data::Batch batch;
  std::vector<int64_t> ids;
  std::vector<int> sizes;
  double worst = 0;
  while (true) {
    // The wait the loader reports is part of the time next() took, measured around it here.
    const auto t0 = std::chrono::steady_clock::now();
    if (!loader.next(batch)) break;
    const double next_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST(batch.step == int64_t(sizes.size()));
    BOOST_TEST((batch.wait_seconds >= 0 && batch.wait_seconds <= next_s),
               "wait " << batch.wait_seconds << " s, next() " << next_s << " s");
    BOOST_TEST(batch.images.size() == size_t(batch.n) * kC * kH * kW);
    sizes.push_back(batch.n);
    for (int i = 0; i < batch.n; ++i) {
      const int64_t id = batch.ids[i];
      ids.push_back(id);
      BOOST_TEST(batch.labels[i] == id % 4);
      for (int c = 0; c < kC; ++c)
        for (int y = 0; y < kH; ++y)
          for (int x = 0; x < kW; ++x) {
            const float got = batch.images[((i * kC + c) * kH + y) * kW + x];
            worst = std::max(worst, double(std::abs(got - normalised(pixel(id, c, y, x), c))));
          }
    }
  }
  BOOST_TEST(worst <= 1e-6);
  BOOST_TEST((sizes == std::vector<int>{4, 4, 2}));
  BOOST_TEST((ids == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  BOOST_TEST(!loader.next(batch));  // stays at the end
}

BOOST_AUTO_TEST_CASE(transform_gives_the_expected_pixels_for_known_parameters) {
  data::Normaliser norm(kMean, kStd);
  std::vector<uint8_t> img;
  for (int c = 0; c < kC; ++c)
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x) img.push_back(pixel(5, c, y, x));
  std::vector<float> out(img.size());
  for (const data::AugmentParams& p :
       {data::AugmentParams{0, 0, true}, data::AugmentParams{1, -2, true},
        data::AugmentParams{-4, 4, false}, data::AugmentParams{3, 0, false}}) {
    BOOST_TEST_CONTEXT("dx " << p.dx << " dy " << p.dy << " flip " << p.flip) {
      data::transform_image(img.data(), kC, kH, kW, p, norm, out.data());
      const auto expected = expected_augmented(5, p, 4);
      double worst = 0;
      for (size_t i = 0; i < out.size(); ++i)
        worst = std::max(worst, double(std::abs(out[i] - expected[i])));
      BOOST_TEST(worst <= 1e-6);
    }
  }
  // Spot checks by hand: a pure flip mirrors a row; dy = -2 makes the top two rows padding.
  data::transform_image(img.data(), kC, kH, kW, {0, 0, true}, norm, out.data());
  BOOST_TEST(out[0] == normalised(pixel(5, 0, 0, kW - 1), 0));
  data::transform_image(img.data(), kC, kH, kW, {1, -2, false}, norm, out.data());
  BOOST_TEST(out[kW + 3] == normalised(0, 0));                      // row 1: padding
  BOOST_TEST(out[2 * kW + 3] == normalised(pixel(5, 0, 0, 4), 0));  // row 2 <- row 0, col 4
  BOOST_TEST(out[2 * kW + kW - 1] == normalised(0, 0));             // col 6 is padding
}

BOOST_AUTO_TEST_CASE(augmentation_depends_on_seed_epoch_and_id_only) {
  const std::string dir = write_split("load-aug", 24, 2);
  // Every id's augmented image, as seen by each rank of a world of `world` ranks.
  auto images_by_id = [&](int world) {
    std::map<int64_t, std::vector<float>> seen;
    for (int rank = 0; rank < world; ++rank) {
      auto o = options(3, true, true, Remainder::kDrop);
      o.rank = rank;
      o.world_size = world;
      data::Loader loader(data::ShardSet::open(dir, "train"), o);
      loader.start_epoch(2);
      data::Batch b;
      const size_t bytes = kC * kH * kW;
      while (loader.next(b))
        for (int i = 0; i < b.n; ++i)
          seen[b.ids[i]].assign(b.images.begin() + i * bytes, b.images.begin() + (i + 1) * bytes);
    }
    return seen;
  };
  const auto one = images_by_id(1), four = images_by_id(4);
  BOOST_TEST(one.size() == 24u);
  BOOST_TEST((one == four));
  size_t worst_id = 0;
  double worst = 0;
  for (const auto& [id, image] : one) {
    const auto expected = expected_augmented(id, data::augment_params(11, 2, id, 4), 4);
    for (size_t i = 0; i < image.size(); ++i)
      if (std::abs(image[i] - expected[i]) > worst)
        worst = std::abs(image[i] - expected[i]), worst_id = id;
  }
  BOOST_TEST(worst <= 1e-6, "worst difference " << worst << " at id " << worst_id);
  // The draws cover every offset and both flips.
  std::map<int, int> dx, dy;
  int flips = 0;
  for (int64_t id = 0; id < 2000; ++id) {
    const auto p = data::augment_params(11, 0, id, 4);
    ++dx[p.dx];
    ++dy[p.dy];
    flips += p.flip;
  }
  BOOST_TEST(dx.size() == 9u);
  BOOST_TEST(dy.size() == 9u);
  BOOST_TEST((dx.begin()->first == -4 && dx.rbegin()->first == 4));
  BOOST_TEST(std::abs(flips - 1000) < 150);
  BOOST_TEST((data::augment_params(11, 0, 7, 4).dx != data::augment_params(11, 1, 7, 4).dx ||
              data::augment_params(11, 0, 7, 4).dy != data::augment_params(11, 1, 7, 4).dy ||
              data::augment_params(11, 0, 7, 4).flip != data::augment_params(11, 1, 7, 4).flip ||
              data::augment_params(11, 0, 8, 4).dx != data::augment_params(11, 1, 8, 4).dx));
}

// data.augment = crop: the same offsets as crop-and-flip at this pad, never a mirror, every
// image the long way's; with pad 2 no offset reaches 3.
BOOST_AUTO_TEST_CASE(crop_alone_keeps_the_offsets_and_never_mirrors) {
  const std::string dir = write_split("load-crop", 24, 2);
  auto o = options(4, true, false, Remainder::kDrop);
  o.augment = data::AugmentKind::kCrop;
  o.augment_pad = 2;
  data::Loader loader(data::ShardSet::open(dir, "train"), o);
  loader.start_epoch(1);
  data::Batch b;
  const size_t bytes = kC * kH * kW;
  int images = 0, mirrored_draws = 0, moved = 0;
  double worst = 0;
  while (loader.next(b))
    for (int i = 0; i < b.n; ++i, ++images) {
      data::AugmentParams p = data::augment_params(11, 1, b.ids[i], 2);
      mirrored_draws += p.flip;
      moved += p.dx != 0 || p.dy != 0;
      BOOST_TEST((std::abs(p.dx) <= 2 && std::abs(p.dy) <= 2));
      p.flip = false;
      const auto expected = expected_augmented(b.ids[i], p, 2);
      for (size_t k = 0; k < bytes; ++k)
        worst = std::max(worst, double(std::abs(b.images[i * bytes + k] - expected[k])));
    }
  BOOST_TEST(images == 24);
  BOOST_TEST(worst <= 1e-6, "worst difference " << worst);
  // The draws did ask for mirrors (which crop drops) and did move images.
  BOOST_TEST(mirrored_draws > 0);
  BOOST_TEST(moved > 0);
  BOOST_TEST((data::parse_augment("crop") == data::AugmentKind::kCrop));
}

BOOST_AUTO_TEST_CASE(batches_follow_the_sampler_and_epochs_restart) {
  const std::string dir = write_split("load-epochs", 50, 4);
  auto o = options(4, true, false, Remainder::kPad);
  o.rank = 1;
  o.world_size = 3;
  data::Loader loader(data::ShardSet::open(dir, "train"), o);
  BOOST_TEST(loader.steps_per_epoch() == 5);  // ceil(50 / 12)
  for (int epoch : {0, 1}) {
    loader.start_epoch(epoch);
    std::vector<int64_t> ids;
    data::Batch b;
    while (loader.next(b)) ids.insert(ids.end(), b.ids.begin(), b.ids.end());
    BOOST_TEST(ids == loader.sampler().rank_ids(epoch, 1));
  }
  // Abandon epoch 2 after one batch: epoch 3 starts at its own step 0.
  loader.start_epoch(2);
  data::Batch b;
  BOOST_TEST(loader.next(b));
  loader.start_epoch(3);
  std::vector<int64_t> ids;
  int64_t expected_step = 0;
  bool steps_in_order = true;
  while (loader.next(b)) {
    steps_in_order = steps_in_order && b.step == expected_step++;
    ids.insert(ids.end(), b.ids.begin(), b.ids.end());
  }
  BOOST_TEST(steps_in_order);
  BOOST_TEST(ids == loader.sampler().rank_ids(3, 1));
}

BOOST_AUTO_TEST_CASE(a_reader_error_reaches_the_consumer_and_shutdown_is_clean) {
  const std::string dir = write_split("load-err", 40, 1);
  const std::string path = dir + "/train-00000-of-00001.h5";
  {
    data::Loader loader(data::ShardSet::open(dir, "train"),
                        options(4, false, false, Remainder::kDrop));
    const auto bytes = fs::file_size(path);
    fs::resize_file(path, 4096);  // the pixels are gone from under the open file
    loader.start_epoch(0);
    data::Batch b;
    // Thrown on the reader thread, rethrown by next() on this one.
    BOOST_CHECK_EXCEPTION(while (loader.next(b)){}, InputError, [&](const InputError& e) {
      BOOST_TEST(std::string(e.what()) == "shard " + path +
                                              " was truncated or replaced while training: size " +
                                              std::to_string(bytes) + " -> 4096 bytes");
      return true;
    });
  }
  // Destroyed with a full queue and a reader waiting: joins, no hang.
  const std::string ok = write_split("load-stop", 40, 2);
  data::Loader loader(data::ShardSet::open(ok, "train"), options(2, true, true, Remainder::kDrop));
  loader.start_epoch(0);
  BOOST_CHECK_THROW(data::Loader(data::ShardSet::open(ok, "train"),
                                 [] {
                                   auto o = options(2, true, false, Remainder::kDrop);
                                   o.prefetch_batches = 0;
                                   return o;
                                 }()),
                    InputError);
}

BOOST_AUTO_TEST_CASE(next_before_start_epoch_is_an_error) {
  const std::string dir = write_split("load-early", 8, 1);
  data::Loader loader(data::ShardSet::open(dir, "train"),
                      options(2, true, false, Remainder::kDrop));
  data::Batch b;
  BOOST_CHECK_THROW(loader.next(b), Error);
}

BOOST_AUTO_TEST_SUITE_END()
