// app.hpp — the program behind main(): MPI start-up, the command (training, or `ringtrain
// predict`), the exit code. It sits above train/ and predict/ and picks between them.
#pragma once

namespace ringtrain::app {

// MPI start-up, the command line (agreed across ranks), the command's run, the exit code.
int run_app(int argc, char** argv);

}  // namespace ringtrain::app
