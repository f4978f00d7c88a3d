// app.cpp — the program behind main(): MPI start-up, the command line, exit codes.
//
// The command line is parsed on every rank and agreed (config_agreement.hpp): a parse error
// or a configuration that differs from rank 0's is printed once, by rank 0, and every rank
// exits 2. Set-up errors go through fail_together(): rank 0 prints each distinct
// message once with the ranks that raised it, and every rank exits non-zero. An error inside a
// step, where the other ranks may be waiting in a collective, is printed by its rank, which then
// aborts the job so that nothing hangs.
#include "ringtrain/app/app.hpp"

#include <cstdio>
#include <memory>
#include <string>

#include "ringtrain/comm/communicator.hpp"
#include "ringtrain/config/config.hpp"
#include "ringtrain/core/error.hpp"
#include "ringtrain/core/log.hpp"
#include "ringtrain/predict/predict.hpp"
#include "ringtrain/train/config_agreement.hpp"
#include "ringtrain/train/fail_together.hpp"
#include "ringtrain/train/trainer.hpp"

namespace ringtrain::app {
namespace {

using train::StartRequest;

// Parses the command line. What a rank finds here it does not act on alone: the ranks agree
// first (agree_on_start), since in an MPMD launch or with per-node decks they may differ.
StartRequest configure(int argc, char** argv, const comm::Communicator& comm) {
  StartRequest request;
  try {
    CommandLine cl = parse_command_line(argc, argv);
    if (cl.help) {
      request.kind = StartRequest::kPrint;
      request.text = cl.help_text;
      return request;
    }
    validate_for_world(cl.config, comm.size());
    if (cl.print_deck) {
      request.kind = StartRequest::kPrint;
      request.text = cl.config.effective_deck;
      return request;
    }
    request.config = cl.config;
  } catch (const InputError& e) {
    request.kind = StartRequest::kBadInput;
    request.text = e.what();
  }
  return request;
}

}  // namespace

int run_app(int argc, char** argv) {
  std::unique_ptr<comm::Communicator> comm;
  try {
    comm = std::make_unique<comm::Communicator>();
  } catch (const std::exception& e) {
    log::error(e.what());
    return kExitFailure;
  }
  if (argc > 1 && std::string(argv[1]) == "predict")
    return predict::run_predict(argc - 1, argv + 1, *comm);
  const StartRequest request = configure(argc, argv, *comm);
  int refused = -1;  // the start-up agreement's exit code, when it ends the job
  const int code = train::run_to_exit_code(*comm, [&] {
    refused = train::agree_on_start(*comm, request);
    if (refused < 0) train::train(request.config, *comm);
  });
  return refused >= 0 ? refused : code;
}

}  // namespace ringtrain::app
