// main.cpp — ringtrain: everything is in train::run_app (MPI, the deck, training).
#include "ringtrain/train/trainer.hpp"

int main(int argc, char** argv) { return ringtrain::train::run_app(argc, argv); }
