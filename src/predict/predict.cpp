// predict.cpp — ringtrain predict: inputs expanded and split over ranks in whole batches, the
// model file's network run in inference mode, per-image results gathered and written by rank 0.
#include "ringtrain/predict/predict.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>

#include "ringtrain/backend/backend.hpp"
#include "ringtrain/core/atomic_file.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/data/augment.hpp"
#include "ringtrain/data/image_decode.hpp"
#include "ringtrain/io/h5.hpp"
#include "ringtrain/io/model_file.hpp"
#include "ringtrain/nn/inference_plan.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/model_file.hpp"
#include "ringtrain/train/fail_together.hpp"
#include "ringtrain/train/gather_rows.hpp"
#include "ringtrain/train/gpu_binding.hpp"
#include "ringtrain/train/inspect_metrics.hpp"

namespace ringtrain::predict {

// What prediction shares with training: failing together, the rank's backend, rows gathered to
// rank 0, the inspection heads' probabilities.
using train::fail_together;
using train::gather_rows_to_root;
using train::make_rank_backend;
using train::run_to_exit_code;
using train::sigmoid_probability;

namespace fs = std::filesystem;
namespace po = boost::program_options;

// ---- command line -------------------------------------------------------------------------

namespace {

po::options_description predict_flags(PredictOptions& o, std::string& backend,
                                      std::string& precision, int& threads) {
  po::options_description desc("ringtrain predict --model CKPT --input PATH... [options]");
  desc.add_options()("help,h", "print this help and exit")(
      "model", po::value<std::string>(&o.model), "model file: a checkpoint ringtrain wrote")(
      "input", po::value<std::vector<std::string>>(&o.inputs)->multitoken(),
      "shard files (.h5), image files (.png .jpg .jpeg .tif .tiff) or folders of them, in order")(
      "output", po::value<std::string>(&o.output)->default_value(o.output),
      "writes OUTPUT.csv and OUTPUT.h5")("top-k", po::value<int>(&o.top_k)->default_value(0),
                                         "classes per image (0: up to 3)")(
      "batch", po::value<int>(&o.batch)->default_value(o.batch), "images per forward pass")(
      "tta", po::value<std::string>(&o.tta)->default_value(o.tta),
      "test-time augmentation: none; flip (the image and its mirror image); dihedral (the 8 "
      "rotations and mirrorings: fiber end faces); the probabilities of every view averaged")(
      "weights", po::value<std::string>(&o.weights)->default_value(o.weights),
      "averaged: the run's moving average of the weights where it kept one (train.ema_decay), "
      "else its weights; raw: its weights")(
      "max-pixels", po::value<int64_t>(&o.max_pixels)->default_value(o.max_pixels),
      "refuse an image file whose header declares more pixels (before decoding it)")(
      "deck", po::value<std::string>(), "take train.backend, precision and threads from this deck")(
      "backend", po::value<std::string>(&backend),
      "cpu, cuda or ref (default: the deck's, or cpu)")(
      "precision", po::value<std::string>(&precision), "fp32 or bf16 (cuda also fp16, tf32)")(
      "threads", po::value<int>(&threads), "threads per rank (0: this rank's share of the cores)");
  return desc;
}

// The deck's [train] keys, through the trainer's own parser (so a deck's errors read the same).
TrainConfig deck_train_config(const std::string& deck) {
  const char* argv[] = {"ringtrain", "--deck", deck.c_str()};
  return parse_command_line(3, argv).config.train;
}

}  // namespace

PredictCommandLine parse_predict_command_line(int argc, const char* const argv[]) {
  PredictCommandLine cl;
  PredictOptions& o = cl.options;
  std::string backend, precision;
  int threads = -1;
  po::options_description desc = predict_flags(o, backend, precision, threads);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(str("ringtrain predict: ", e.what(), " (ringtrain predict --help)"));
  }
  if (vm.count("help")) {
    std::ostringstream text;
    text << desc;
    cl.help = true;
    cl.help_text = text.str();
    return cl;
  }
  if (vm.count("deck")) o.device = deck_train_config(vm["deck"].as<std::string>());
  if (!backend.empty()) o.device.backend = backend;
  if (!precision.empty()) o.device.precision = precision;
  if (threads >= 0) o.device.threads = threads;
  RT_REQUIRE_INPUT(!o.model.empty(), "ringtrain predict: --model CKPT is required");
  RT_REQUIRE_INPUT(!o.inputs.empty(), "ringtrain predict: --input PATH... is required");
  RT_REQUIRE_INPUT(o.batch >= 1, "ringtrain predict: bad value '", o.batch,
                   "' for --batch (at least 1)");
  RT_REQUIRE_INPUT(o.max_pixels >= 1, "ringtrain predict: bad value '", o.max_pixels,
                   "' for --max-pixels (at least 1)");
  RT_REQUIRE_INPUT(o.top_k >= 0, "ringtrain predict: bad value '", o.top_k,
                   "' for --top-k (0 or more)");
  RT_REQUIRE_INPUT(o.weights == "averaged" || o.weights == "raw", "ringtrain predict: bad value '",
                   o.weights, "' for --weights (averaged or raw)");
  RT_REQUIRE_INPUT(o.tta == "none" || o.tta == "flip" || o.tta == "dihedral",
                   "ringtrain predict: bad value '", o.tta, "' for --tta (none, flip or dihedral)");
  RT_REQUIRE_INPUT(
      o.device.backend == "cpu" || o.device.backend == "cuda" || o.device.backend == "ref",
      "ringtrain predict: bad value '", o.device.backend,
      "' for --backend (one of: cpu, cuda, ref)");
  backend::parse_precision(o.device.precision);  // names a bad value
  return cl;
}

// ---- inputs -------------------------------------------------------------------------------

namespace {

// One input file: a shard (rows of /images) or an image file (one row).
struct Source {
  std::string path;
  bool shard = false;
  int64_t rows = 1;
};

// One image: row `row` of source `source`.
struct Item {
  size_t source;
  int64_t row;
};

bool is_shard_file(const fs::path& p) {
  return p.extension() == ".h5";
}

// A shard's /images must be uint8 [N, C, H, W] of the model's input shape.
Source open_shard(const std::string& path, const io::ModelCard& card) {
  const h5::File file = h5::File::open_read(path);
  RT_REQUIRE_INPUT(file.root().exists("images"), path,
                   ": no /images dataset (not a ringtrain shard)");
  const h5::Dataset images = file.root().open_dataset("images");
  const h5::Dims dims = images.dims();
  RT_REQUIRE_INPUT(images.holds<uint8_t>() && dims.size() == 4, path,
                   ": /images must be uint8 [N, C, H, W]");
  const std::vector<int32_t> chw{int32_t(dims[1]), int32_t(dims[2]), int32_t(dims[3])};
  RT_REQUIRE_INPUT(chw == card.input_shape, path, ": images are ", chw[0], "x", chw[1], "x", chw[2],
                   ", the model takes ", card.input_shape[0], "x", card.input_shape[1], "x",
                   card.input_shape[2]);
  return Source{path, true, int64_t(dims[0])};
}

void add_file(const fs::path& p, const io::ModelCard& card, std::vector<Source>& sources) {
  if (is_shard_file(p)) {
    sources.push_back(open_shard(p.string(), card));
  } else {
    RT_REQUIRE_INPUT(data::is_image_extension(p.string()), p.string(),
                     ": neither a shard (.h5) nor an image (.png .jpg .jpeg .tif .tiff)");
    sources.push_back(Source{p.string(), false, 1});
  }
}

// Every input in order; a folder's shards and images, searched through its sub-folders (an
// ImageFolder tree, say) and sorted by path; names starting with '.' are left out.
std::vector<Source> expand_inputs(const std::vector<std::string>& inputs,
                                  const io::ModelCard& card) {
  std::vector<Source> sources;
  for (const std::string& input : inputs) {
    const fs::path p(input);
    RT_REQUIRE_INPUT(fs::exists(p), "--input ", input, ": no such file or folder");
    if (!fs::is_directory(p)) {
      add_file(p, card, sources);
      continue;
    }
    std::vector<fs::path> files;
    for (auto it = fs::recursive_directory_iterator(p); it != fs::recursive_directory_iterator();
         ++it) {
      const fs::path& f = it->path();
      if (f.filename().string().rfind('.', 0) == 0) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && (is_shard_file(f) || data::is_image_extension(f.string())))
        files.push_back(f);
    }
    RT_REQUIRE_INPUT(!files.empty(), "--input ", input,
                     ": the folder holds no shards (.h5) or images (.png .jpg .jpeg .tif .tiff)");
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) add_file(f, card, sources);
  }
  return sources;
}

std::vector<Item> items_of(const std::vector<Source>& sources) {
  std::vector<Item> items;
  for (size_t s = 0; s < sources.size(); ++s)
    for (int64_t r = 0; r < sources[s].rows; ++r) items.push_back({s, r});
  return items;
}

std::string item_path(const std::vector<Source>& sources, const Item& item) {
  const Source& s = sources[item.source];
  return s.shard ? str(s.path, "#", item.row) : s.path;
}

// ---- the loop -----------------------------------------------------------------------------

// Per image: softmax over the classes, then (inspect) sigmoid of defects, pass and zones.
size_t values_per_image(const io::ModelCard& card) {
  return card.class_names.size() +
         (card.inspect() ? card.defect_names.size() + 1 + size_t(nn::kZones) : 0);
}

class Predictor {
 public:
  Predictor(const PredictOptions& o, const io::ModelCard& card, std::vector<Source> sources,
            backend::Backend& be, nn::Model& model)
      : o_(o),
        card_(card),
        sources_(std::move(sources)),
        be_(be),
        model_(model),
        plan_(model),
        normaliser_(card.mean, card.std),
        views_(data::tta_views(data::parse_tta(o.tta, "--tta"))) {
    RT_REQUIRE_INPUT(views_.size() <= 2 || card.input_shape[1] == card.input_shape[2],
                     "--tta dihedral: the model takes ", card.input_shape[1], "x",
                     card.input_shape[2], " images; its rotations by 90 degrees need square ones");
  }

  // This rank's images [first, last), batch by batch: values_per_image() floats each.
  std::vector<float> run(const std::vector<Item>& items, size_t first, size_t last) {
    std::vector<float> values;
    for (size_t b = first; b < last; b += size_t(o_.batch)) {
      const size_t n = std::min(last, b + size_t(o_.batch)) - b;
      read_batch(items, b, n);
      forward_views(n, values);
    }
    return values;
  }

 private:
  size_t image_bytes() const {
    return size_t(card_.input_shape[0]) * size_t(card_.input_shape[1]) *
           size_t(card_.input_shape[2]);
  }

  // Pixels of items [b, b+n), normalised exactly as the training loader does (no augmentation).
  void read_batch(const std::vector<Item>& items, size_t b, size_t n) {
    const size_t bytes = image_bytes();
    pixels_.resize(n * bytes);
    for (size_t i = 0; i < n;) {
      const Item& item = items[b + i];
      const Source& s = sources_[item.source];
      if (!s.shard) {
        const int c = card_.input_shape[0], h = card_.input_shape[1], w = card_.input_shape[2];
        RT_REQUIRE_INPUT(h == w, s.path, ": the model takes ", h, "x", w,
                         " images; image files are fitted to square inputs only");
        const std::vector<uint8_t> fitted =
            data::fit_image(data::decode_image(s.path, o_.max_pixels), c, h);
        std::copy(fitted.begin(), fitted.end(), pixels_.begin() + std::ptrdiff_t(i * bytes));
        ++i;
        continue;
      }
      size_t run = 1;  // consecutive rows of one shard: one read
      while (i + run < n && items[b + i + run].source == item.source) ++run;
      const h5::File file = h5::File::open_read(s.path);
      file.root().open_dataset("images").read_rows<uint8_t>(hsize_t(item.row), hsize_t(run),
                                                            pixels_.data() + i * bytes);
      i += run;
    }
    input_host_.resize(n * bytes);
    for (size_t i = 0; i < n; ++i)
      data::transform_image(pixels_.data() + i * bytes, card_.input_shape[0], card_.input_shape[1],
                            card_.input_shape[2], data::AugmentParams{}, normaliser_,
                            input_host_.data() + i * bytes);
  }

  // Every view's probabilities, averaged (one view: the image's own, unchanged).
  void forward_views(size_t n, std::vector<float>& values) {
    if (views_.size() == 1) return forward(input_host_, n, values);
    const int c = card_.input_shape[0], h = card_.input_shape[1], w = card_.input_shape[2];
    const size_t image = size_t(c) * size_t(h) * size_t(w), at = values.size();
    view_host_.resize(input_host_.size());
    std::vector<double> sum;
    for (const data::AugmentParams& view : views_) {
      for (size_t i = 0; i < n; ++i)
        data::view_image(input_host_.data() + i * image, c, h, w, view,
                         view_host_.data() + i * image);
      values.resize(at);
      forward(view_host_, n, values);
      sum.resize(values.size() - at, 0.0);
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += values[at + k];
    }
    for (size_t k = 0; k < sum.size(); ++k) values[at + k] = float(sum[k] / double(views_.size()));
  }

  void forward(const std::vector<float>& images, size_t n, std::vector<float>& values) {
    const backend::Shape shape{int64_t(n), card_.input_shape[0], card_.input_shape[1],
                               card_.input_shape[2]};
    if (input_.empty() || input_.shape() != shape) input_ = be_.alloc(shape);
    be_.upload(images.data(), input_);
    plan_.run(input_);
    const size_t classes = card_.class_names.size();
    logits_.resize(n * classes);
    be_.download(plan_.logits(), logits_.data());
    std::vector<std::vector<float>> heads;
    if (model_.inspect())
      for (nn::Head h : {nn::Head::kDefects, nn::Head::kPass, nn::Head::kZones}) {
        heads.emplace_back(size_t(plan_.head(h).numel()));
        be_.download(plan_.head(h), heads.back().data());
      }
    for (size_t i = 0; i < n; ++i) {
      append_softmax(logits_.data() + i * classes, classes, values);
      for (const std::vector<float>& head : heads) {
        const size_t width = head.size() / n;
        for (size_t k = 0; k < width; ++k)
          values.push_back(sigmoid_probability(head[i * width + k]));
      }
    }
  }

  static void append_softmax(const float* z, size_t classes, std::vector<float>& out) {
    const double top = *std::max_element(z, z + classes);
    double total = 0;
    for (size_t k = 0; k < classes; ++k) total += std::exp(double(z[k]) - top);
    for (size_t k = 0; k < classes; ++k) out.push_back(float(std::exp(double(z[k]) - top) / total));
  }

  const PredictOptions& o_;
  const io::ModelCard& card_;
  std::vector<Source> sources_;
  backend::Backend& be_;
  nn::Model& model_;
  nn::InferencePlan plan_;  // the model's inference pass, batch norms folded (inference_plan.hpp)
  data::Normaliser normaliser_;
  std::vector<uint8_t> pixels_;
  std::vector<data::AugmentParams> views_;  // --tta
  std::vector<float> input_host_, view_host_, logits_;
  backend::Tensor input_;
};

// ---- output -------------------------------------------------------------------------------

// One image's results, read from its values_per_image() floats.
struct Row {
  std::vector<int> top;  // class indices, most probable first (ties: lower index first)
  const float* probs = nullptr;
  const float* defects = nullptr;
  float pass = 0;
  const float* zones = nullptr;
};

Row row_of(const float* v, const io::ModelCard& card, int k) {
  Row r;
  const size_t classes = card.class_names.size();
  r.probs = v;
  r.top.resize(classes);
  std::iota(r.top.begin(), r.top.end(), 0);
  std::stable_sort(r.top.begin(), r.top.end(), [&](int a, int b) { return v[a] > v[b]; });
  r.top.resize(size_t(k));
  if (card.inspect()) {
    r.defects = v + classes;
    r.pass = v[classes + card.defect_names.size()];
    r.zones = v + classes + card.defect_names.size() + 1;
  }
  return r;
}

// RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string probability(float p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", double(p));
  return buf;
}

std::string defects_found(const Row& r, const io::ModelCard& card) {
  std::string found;
  for (size_t d = 0; d < card.defect_names.size(); ++d)
    if (r.defects[d] >= 0.5f) found += (found.empty() ? "" : "|") + card.defect_names[d];
  return found;
}

std::string csv_text(const std::vector<std::string>& paths, const std::vector<float>& values,
                     const io::ModelCard& card, int k) {
  std::string text = "path";
  for (int i = 1; i <= k; ++i) text += str(",rank", i, ",prob", i);
  if (card.inspect()) text += ",defects,pass_prob,verdict,zone_A,zone_B,zone_C,zone_D";
  text += "\n";
  const size_t per = values_per_image(card);
  for (size_t i = 0; i < paths.size(); ++i) {
    const Row r = row_of(values.data() + i * per, card, k);
    text += csv_field(paths[i]);
    for (int c : r.top)
      text += "," + csv_field(card.class_names[size_t(c)]) + "," + probability(r.probs[c]);
    if (card.inspect()) {
      text += "," + csv_field(defects_found(r, card)) + "," + probability(r.pass) + "," +
              (r.pass >= card.pass_threshold ? "pass" : "fail");
      for (int z = 0; z < nn::kZones; ++z) text += r.zones[z] >= 0.5f ? ",pass" : ",fail";
    }
    text += "\n";
  }
  return text;
}

// Column c0..c0+width of every image's values, as one [n, width] block.
std::vector<float> columns(const std::vector<float>& values, size_t per, size_t c0, size_t width) {
  std::vector<float> out;
  for (size_t i = 0; i + per <= values.size(); i += per)
    out.insert(out.end(), values.begin() + std::ptrdiff_t(i + c0),
               values.begin() + std::ptrdiff_t(i + c0 + width));
  return out;
}

void write_hdf5(const std::string& path, const std::string& model_path,
                const std::vector<std::string>& paths, const std::vector<float>& values,
                const io::ModelCard& card, int k) {
  h5::AtomicFile out(path);
  h5::Group& root = out.root();
  const size_t n = paths.size(), per = values_per_image(card), classes = card.class_names.size();
  root.set_attr("model_file", model_path);
  root.set_attr("model", card.model);
  root.set_attr("heads", card.heads);
  root.write_strings("path", paths);
  root.write<float>("probs", {n, classes}, columns(values, per, 0, classes).data())
      .set_attr("class_names", card.class_names);
  std::vector<int32_t> top;
  std::vector<float> top_probs;
  for (size_t i = 0; i < n; ++i) {
    const Row r = row_of(values.data() + i * per, card, k);
    for (int c : r.top) top.push_back(c), top_probs.push_back(r.probs[c]);
  }
  root.write<int32_t>("top_class", {n, hsize_t(k)}, top.data())
      .set_attr("class_names", card.class_names);
  root.write<float>("top_prob", {n, hsize_t(k)}, top_probs.data());
  if (!card.inspect()) return out.commit();
  const size_t d = card.defect_names.size();
  root.write<float>("defect_probs", {n, d}, columns(values, per, classes, d).data())
      .set_attr("names", card.defect_names);
  const std::vector<float> pass = columns(values, per, classes + d, 1);
  const std::vector<float> zones = columns(values, per, classes + d + 1, size_t(nn::kZones));
  root.write<float>("pass_prob", {n}, pass.data());
  std::vector<uint8_t> verdict, zone_verdict;
  for (float p : pass) verdict.push_back(p >= card.pass_threshold);
  for (float p : zones) zone_verdict.push_back(p >= 0.5f);
  root.write<uint8_t>("verdict", {n}, verdict.data())
      .set_attr("meaning", str("1 = pass: P(pass) >= pass_threshold ", card.pass_threshold));
  root.write<float>("zone_probs", {n, hsize_t(nn::kZones)}, zones.data())
      .set_attr("names", card.zone_names);
  root.write<uint8_t>("zone_verdict", {n, hsize_t(nn::kZones)}, zone_verdict.data())
      .set_attr("meaning", "1 = pass: P(zone pass) >= 0.5");
  root.set_attr("pass_threshold", card.pass_threshold);
  out.commit();
}

}  // namespace

// ---- the run ------------------------------------------------------------------------------

void predict(const PredictOptions& o, comm::Communicator& comm) {
  std::unique_ptr<nn::ModelFile> file;  // its card read once, the model built from it later
  std::vector<Source> sources;
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<nn::Model> model;
  bool averaged = false;
  const int threads = o.device.threads > 0 ? o.device.threads : comm.cpu_threads_per_rank();
  fail_together(comm, [&] {
    file = std::make_unique<nn::ModelFile>(o.model);
    sources = expand_inputs(o.inputs, file->card());
    if (comm.rank() == 0)
      h5::require_writable_dir(fs::path(o.output).parent_path().empty()
                                   ? "."
                                   : fs::path(o.output).parent_path().string(),
                               "--output");
  });
  fail_together(comm, [&] {
    int cuda_device = -1;
    be = make_rank_backend(comm, o.device, threads, &cuda_device);
    const nn::ModelWeights weights = nn::parse_model_weights(o.weights, "--weights");
    model = file->build_model(*be, weights);
    averaged = file->averaged(weights);
  });
  const io::ModelCard& card = file->card();
  const std::vector<Item> items = items_of(sources);
  const int k = o.top_k > 0 ? std::min(o.top_k, int(card.class_names.size()))
                            : std::min(3, int(card.class_names.size()));
  // Whole batches per rank, contiguous: batch j holds the same images on any world size.
  const size_t batches = (items.size() + size_t(o.batch) - 1) / size_t(o.batch);
  const size_t b0 = batches * size_t(comm.rank()) / size_t(comm.size());
  const size_t b1 = batches * size_t(comm.rank() + 1) / size_t(comm.size());
  const size_t first = std::min(items.size(), b0 * size_t(o.batch));
  const size_t last = std::min(items.size(), b1 * size_t(o.batch));
  log::info(str("predict: ", items.size(), " image(s) from ", sources.size(), " file(s) on ",
                comm.size(), " rank(s), ", be->name(), " ", o.device.precision, ", model ",
                card.model, " (heads ", card.heads, ")", averaged ? ", averaged weights" : ""));
  Predictor predictor(o, card, sources, *be, *model);
  std::vector<float> mine;
  fail_together(comm, [&] { mine = predictor.run(items, first, last); });
  const std::vector<float> all = gather_rows_to_root(comm, mine);
  fail_together(comm, [&] {
    if (comm.rank() != 0) return;
    std::vector<std::string> paths;
    for (const Item& item : items) paths.push_back(item_path(sources, item));
    write_file_atomically(o.output + ".csv", csv_text(paths, all, card, k));
    write_hdf5(o.output + ".h5", o.model, paths, all, card, k);
    log::info(str("predict: ", o.output, ".csv and ", o.output, ".h5"));
  });
}

int run_predict(int argc, char** argv, comm::Communicator& comm) {
  PredictCommandLine cl;
  try {
    cl = parse_predict_command_line(argc, argv);
  } catch (const InputError& e) {
    if (comm.rank() == 0) log::error_for_ranks(e.what());
    return kExitBadInput;
  }
  if (cl.help) {
    log::info(cl.help_text);
    return kExitOk;
  }
  return run_to_exit_code(comm, [&] { predict(cl.options, comm); });
}

}  // namespace ringtrain::predict
