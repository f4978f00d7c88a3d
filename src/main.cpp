// main.cpp — ringtrain: everything is in app::run_app (MPI, the deck, training or prediction).
#include "ringtrain/app/app.hpp"
#include "ringtrain/core/stop_signals.hpp"

int main(int argc, char** argv) {
  // Before MPI_Init and OpenMP start their threads, so that they inherit the blocked mask.
  ringtrain::StopSignals stop_signals;
  return ringtrain::app::run_app(argc, argv);
}
