// fault.hpp — named fault points where a test can have this process killed (SIGKILL), to show
// that what it writes survives a kill at any instant.
//
// RINGTRAIN_FAULT=NAME kills the process the first time it reaches the point NAME;
// RINGTRAIN_FAULT=NAME@N the N-th time. Unset (the normal case), a point costs one branch.
// The points: atomic-write:partial (half the bytes of a file written), atomic-write:written
// (all written, not yet synced), atomic-write:synced (synced, not yet renamed into place),
// atomic-write:renamed (in place, directory not yet synced).
//
// RINGTRAIN_FAULT=flip-weight:RANK@STEP flips one bit of one weight on rank RANK after optimizer
// step STEP's update (from 1), as silent data corruption would: the ranks' weight check must
// find it (train/weight_check.hpp).
//
// RINGTRAIN_STOP_AT=POINT@RANK stops (SIGSTOP) rank RANK the first time it reaches POINT, as a
// stalled or descheduled rank would be: the other ranks' stall watchdog must end the job.
// The points are the trainer's collective phases (train/phases.hpp ids, e.g. stop-check).
//
// RINGTRAIN_NONFINITE_AT=STEP@RANK makes rank RANK's loss gradient NaN in optimizer step STEP
// (from 1), as an fp16 overflow on one rank would: loss scaling must skip that step on every
// rank, and without it train.on_nonfinite decides.
//
// RINGTRAIN_DROP_MESSAGE=N@RANK makes rank RANK's ring allreduce lose its N-th point-to-point
// message (from 1, counted over the run; comm.shared_memory = false puts every message on
// MPI), as a network or a protocol bug would: every rank then waits in the same bucket with
// no byte moving, and the stall watchdog must end the job naming the bucket and the peers.
#pragma once

#include <cstdint>

namespace ringtrain {

void fault_point(const char* name);
void fault_point_for_rank(const char* name, int rank);
bool nonfinite_fault_at(int64_t step, int rank);
// True for the one step and rank RINGTRAIN_FAULT=flip-weight:RANK@STEP names.
bool flip_weight_fault_at(int64_t step, int rank);
// True for the one message RINGTRAIN_DROP_MESSAGE names; counts rank's messages otherwise.
bool drop_message_fault(int rank);

}  // namespace ringtrain
