// model_file.hpp — what a checkpoint carries for inference (the model file's card): model and
// heads, input geometry, normalisation, class, defect and zone names, the pass threshold.
//
// A checkpoint (format "ringtrain-checkpoint") is the model file. format_version 2 adds, as
// root attributes: heads ("class" | "inspect"), input_shape int32[3] (C, H, W), mean float[C]
// and std float[C] (the loader's normalisation, pixel/255 units, from the train shards),
// class_names string[classes]; with inspect also defect_names string[D], zone_names
// string[4] ("A".."D"), pass_threshold float (chosen on val; 0.5 until chosen) and
// false_accept_target float. `model` (string) was there in version 1; version 1 files still
// resume training but carry none of the rest. docs/MODEL_FILE.md lists the whole layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ringtrain/io/h5.hpp"

namespace ringtrain::io {

constexpr const char* kCheckpointFormat = "ringtrain-checkpoint";
constexpr int32_t kCheckpointVersion = 2;        // written
constexpr int32_t kOldestCheckpointVersion = 1;  // still read by --resume

struct ModelCard {
  std::string model;
  std::string heads = "class";
  std::vector<int32_t> input_shape;  // C, H, W
  std::vector<float> mean, std;      // per channel
  std::vector<std::string> class_names;
  std::vector<std::string> defect_names;  // inspect only
  std::vector<std::string> zone_names;    // inspect only
  float pass_threshold = 0.5f;            // inspect only
  float false_accept_target = 0.01f;      // inspect only
  bool inspect() const { return heads == "inspect"; }
};

// What to do with a checkpoint that is not a model file (a version-1 one): the last words of
// read_model_card's error, the same for predict and rt-export.
constexpr const char* kResaveHint =
    "re-save it as a model file by resuming its run: ringtrain --deck DECK --resume (with its "
    "train.epochs reached it trains no further and rewrites the checkpoint as format_version 2)";

// Sets the card's root attributes (`model` among them).
void write_model_card(h5::Group& root, const ModelCard& card);
// The card of a version-2 file. Anything missing (a version-1 checkpoint, or another file) is
// one InputError naming the file and what it lacks, ending with kResaveHint.
ModelCard read_model_card(const h5::Group& root);

}  // namespace ringtrain::io
