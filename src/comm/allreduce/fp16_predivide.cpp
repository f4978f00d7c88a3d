// fp16_predivide.cpp — the fp16 wire's pre-divide by the world size (fp16_predivide.hpp).
#include "fp16_predivide.hpp"

namespace ringtrain::comm::allreduce {
namespace {

class PredividedAllreducer : public Allreducer {
 public:
  PredividedAllreducer(std::unique_ptr<Allreducer> inner, int world_size)
      : inner_(std::move(inner)), predivisor_(fp16_predivisor(world_size)) {}

  void sum(float* data, size_t count) override { sum_and_divide(data, count, 1.0f); }

  // One extra pass over this rank's values (memory-bound, far below the wire's time); the
  // division after folds into the inner allreducer's own (divisor / P is exact: N x K x scale
  // over a power of two). A sum() past 65504 now comes back finite: the wire carries at most
  // the largest value, and the product by P is fp32.
  void sum_and_divide(float* data, size_t count, float divisor) override {
    divide_floats(data, count, predivisor_);
    const float after = divisor / predivisor_;
    if (after == 1.0f)
      inner_->sum(data, count);
    else
      inner_->sum_and_divide(data, count, after);
  }

  std::string name() const override { return inner_->name(); }
  void set_spin_hint(const std::atomic<bool>* hint) override { inner_->set_spin_hint(hint); }

 private:
  std::unique_ptr<Allreducer> inner_;
  float predivisor_;  // P (fp16_predivisor)
};

}  // namespace

float fp16_predivisor(int world_size) {
  float p = 1.0f;
  while (p < float(world_size)) p *= 2.0f;
  return p;
}

std::unique_ptr<Allreducer> predivide_for_fp16_wire(std::unique_ptr<Allreducer> inner,
                                                    int world_size) {
  return std::make_unique<PredividedAllreducer>(std::move(inner), world_size);
}

}  // namespace ringtrain::comm::allreduce
