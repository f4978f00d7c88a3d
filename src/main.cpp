// main.cpp — ringtrain: everything is in train::run_app (MPI, the deck, training).
#include "ringtrain/core/stop_signals.hpp"
#include "ringtrain/train/trainer.hpp"

int main(int argc, char** argv) {
  // Before MPI_Init and OpenMP start their threads, so that they inherit the blocked mask.
  ringtrain::StopSignals stop_signals;
  return ringtrain::train::run_app(argc, argv);
}
