// fault.hpp — named fault points where a test can have this process killed (SIGKILL), to show
// that what it writes survives a kill at any instant.
//
// RINGTRAIN_FAULT=NAME kills the process the first time it reaches the point NAME;
// RINGTRAIN_FAULT=NAME@N the N-th time. Unset (the normal case), a point costs one branch.
// The points: atomic-write:partial (half the bytes of a file written), atomic-write:written
// (all written, not yet synced), atomic-write:synced (synced, not yet renamed into place),
// atomic-write:renamed (in place, directory not yet synced).
#pragma once

namespace ringtrain {

void fault_point(const char* name);

}  // namespace ringtrain
