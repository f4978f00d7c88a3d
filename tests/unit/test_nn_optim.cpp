// test_nn_optim.cpp — the optimizers (weight decay rules, each rule's checkpoint) and the
// learning-rate schedule.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>

#include "nn_test_util.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/nn/lr_schedule.hpp"
#include "ringtrain/nn/model.hpp"
#include "ringtrain/nn/optimizer.hpp"
#include "ringtrain/nn/weight_average.hpp"

using namespace ringtrain;
using namespace ringtrain::nn;
using namespace rt_test;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_SUITE(nn_optim)

BOOST_AUTO_TEST_CASE(weight_decay_skips_bn_and_bias_unless_asked) {
  auto be = backend::make_backend("cpu", 2);
  for (bool decay_all : {false, true}) {
    auto model = make_model("fibernet", {1, 16, 16}, 5, *be, 1);
    model->zero_grad();
    auto before = [&](size_t i) { return to_host(*be, model->parameters()[i]->value); };
    std::vector<std::vector<float>> w0;
    for (size_t i = 0; i < model->parameters().size(); ++i) w0.push_back(before(i));
    Optimizer sgd(model->parameters(), {0.9, true, 0.1, decay_all}, *be);
    sgd.step(0.5);  // zero gradients: only weight decay moves anything
    for (size_t i = 0; i < model->parameters().size(); ++i) {
      const Parameter& p = *model->parameters()[i];
      std::vector<float> w1 = before(i);
      bool decays = decay_all || !p.no_weight_decay;
      // Nesterov with zero gradient: d = wd*w, buf = d, w -= lr*(d + m*buf) = lr*wd*1.9*w.
      float factor = decays ? 1.0f - 0.5f * 0.1f * 1.9f : 1.0f;
      for (size_t k = 0; k < w1.size(); k += 7)
        BOOST_TEST(w1[k] == w0[i][k] * factor, p.name << " " << tt::tolerance(1e-6f));
    }
  }
}

// Each rule's state (first and second moments, the step count for Adam's bias correction)
// survives a checkpoint: the next step after a load gives the same weights, bit for bit.
BOOST_AUTO_TEST_CASE(optimizer_state_survives_a_checkpoint) {
  auto be = backend::make_backend("cpu", 2);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("rt-test-optimizer-" + std::to_string(getpid()) + ".h5"))
                               .string();
  for (OptimizerKind kind :
       {OptimizerKind::kSgd, OptimizerKind::kLars, OptimizerKind::kLamb, OptimizerKind::kAdamW}) {
    auto model = make_model("cnn_small", {1, 8, 8}, 3, *be, 1);
    Tensor x = random_tensor(*be, {4, 1, 8, 8}, 2);
    int32_t labels[4] = {0, 1, 2, 1};
    auto step = [&](Optimizer& optimizer) {
      model->forward(x, true);
      model->loss(labels);
      model->backward();
      optimizer.step(0.1);
    };
    OptimizerOptions options{0.9, false, 1e-4, false, kind};
    Optimizer a(model->parameters(), options, *be);
    step(a);
    step(a);
    {
      auto file = h5::File::create(path);
      h5::Group g = file.root().create_group("optimizer");
      a.save(g);
      file.close();
    }
    Optimizer b(model->parameters(), options, *be);
    b.load(h5::File::open_read(path).root().open_group("optimizer"));
    BOOST_TEST(b.steps() == 2);
    std::vector<std::vector<float>> saved;
    for (Parameter* p : model->parameters()) saved.push_back(to_host(*be, p->value));
    step(a);
    std::vector<std::vector<float>> via_a;
    for (Parameter* p : model->parameters()) via_a.push_back(to_host(*be, p->value));
    for (size_t i = 0; i < saved.size(); ++i)
      be->upload(saved[i].data(), model->parameters()[i]->value);
    step(b);
    for (size_t i = 0; i < saved.size(); ++i)
      BOOST_TEST(to_host(*be, model->parameters()[i]->value) == via_a[i],
                 optimizer_name(kind) << " " << model->parameters()[i]->name);
    // Another rule's state is refused by name.
    OptimizerOptions other = options;
    other.kind = kind == OptimizerKind::kLamb ? OptimizerKind::kSgd : OptimizerKind::kLamb;
    Optimizer c(model->parameters(), other, *be);
    BOOST_TEST(error_of([&] {
                 c.load(h5::File::open_read(path).root().open_group("optimizer"));
               }) == "file " + path + ": the checkpoint holds the state of train.optimizer = " +
                         optimizer_name(kind) + ", not " + optimizer_name(other.kind) +
                         ": resume with the optimizer it was written by");
  }
  std::filesystem::remove(path);
}

// The average after three updates with every weight and buffer at 1, 2 and 3 (from 0), decay
// 0.9 warmed up as min(0.9, (1+t)/(10+t)): d = 0.1, 2/11, 0.25, so 0.9, then 2/11 0.9 + 9/11 2 =
// 1.8, then 0.25 1.8 + 0.75 3 = 2.7; swapped in and back; through a file and back.
BOOST_AUTO_TEST_CASE(weight_average_after_three_updates) {
  auto be = backend::make_backend("cpu", 2);
  auto model = make_model("cnn_small", {1, 8, 8}, 3, *be, 1);
  std::vector<backend::Tensor*> all;
  for (Parameter* p : model->parameters()) all.push_back(&p->value);
  for (const NamedBuffer& b : model->buffers()) all.push_back(b.tensor);
  auto set_all = [&](float v) {
    for (backend::Tensor* t : all) be->fill(*t, v);
  };
  auto all_equal = [&](float v) {
    for (backend::Tensor* t : all)
      for (float x : to_host(*be, *t))
        if (std::fabs(x - v) > 1e-6f) return false;
    return true;
  };
  set_all(0);
  WeightAverage average(*model, 0.9);
  for (float v : {1.0f, 2.0f, 3.0f}) {
    set_all(v);
    average.update();
  }
  BOOST_TEST(average.updates() == 3);
  BOOST_TEST(average.next_decay() == 4.0 / 13);
  average.swap();
  BOOST_TEST(all_equal(2.7f));
  average.swap();
  BOOST_TEST(all_equal(3.0f));
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("rt-test-ema-" + std::to_string(getpid()) + ".h5"))
                               .string();
  {
    auto file = h5::File::create(path);
    h5::Group g = file.root().create_group("ema");
    average.save(g);
    file.close();
  }
  WeightAverage loaded(*model, 0.9);  // starts from the weights: 3
  loaded.load(h5::File::open_read(path).root().open_group("ema"));
  BOOST_TEST(loaded.updates() == 3);
  loaded.swap();
  BOOST_TEST(all_equal(2.7f));
  loaded.swap();
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(optimizer_names) {
  for (const char* name : {"sgd", "lars", "lamb", "adamw"})
    BOOST_TEST(optimizer_name(parse_optimizer(name)) == std::string(name));
  BOOST_TEST(error_of([] { parse_optimizer("adam"); }) ==
             "train.optimizer = adam: expected sgd, lars, lamb or adamw");
}

BOOST_AUTO_TEST_CASE(warmup_then_cosine_and_step) {
  LRScheduleOptions o;
  o.base_lr = 0.4;
  o.warmup_steps = 10;
  o.total_steps = 110;
  o.min_lr = 0.0;
  LRSchedule cosine(o);
  BOOST_TEST(cosine.lr(0) == 0.0);
  BOOST_TEST(cosine.lr(5) == 0.2, tt::tolerance(1e-12));
  BOOST_TEST(cosine.lr(10) == 0.4, tt::tolerance(1e-12));
  BOOST_TEST(cosine.lr(60) == 0.2, tt::tolerance(1e-12));
  BOOST_TEST(cosine.lr(110) == 0.0, tt::tolerance(1e-12));
  BOOST_TEST(cosine.lr(500) == 0.0, tt::tolerance(1e-12));
  o.decay = "step";
  o.milestones = {50, 80};
  LRSchedule step(o);
  BOOST_TEST(step.lr(49) == 0.4, tt::tolerance(1e-12));
  BOOST_TEST(step.lr(50) == 0.04, tt::tolerance(1e-12));
  BOOST_TEST(step.lr(80) == 0.004, tt::tolerance(1e-12));
  BOOST_TEST(scaled_lr(0.1, 1024, 256) == 0.4, tt::tolerance(1e-12));
  o.decay = "linear";
  try {
    LRSchedule bad(o);
    BOOST_FAIL("no throw");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "lr decay 'linear' is unknown: use cosine, step or constant");
  }
}

BOOST_AUTO_TEST_SUITE_END()
