#pragma once
#include <ostream>

#include "adaptiveload/plan/plan.h"

namespace adaptiveload {

// Writes the plan as JSONL, one line per global step, steps [first, end):
// {"step":t,"samples":n,"tokens":s,"padded":k,"ranks":[[[id,...],[id,...]],[[id,...]],...],
//  "padded_mbs":[[rank,i],...]}
// ids are 0-based manifest row ids; each rank's list holds its micro-batches in order.
// padded_mbs lists the micro-batches (rank, index in its list) that repeat earlier samples
// to keep ranks in lockstep (end policy pad); k counts their samples. Usually empty.
// A plan with sequence-parallel groups adds "groups":[{"ranks":[r,..,r+g-1],"mbs":[i,..]},..]:
// each group of g > 1 ranks (an aligned block) and the indices of the micro-batches it runs
// together; each of its ranks lists them at those indices (the same ids; a rank holds its
// 1/g of every sample's tokens). Micro-batches in no group run on their rank alone.
// A packed plan (--packing on) adds "packed":true after "sync": its micro-batches may hold
// samples of several buckets, trained as one packed sequence (each sample attending only to
// itself; python/adaptiveload/packing.py).
void write_plan_jsonl(const Plan& plan, std::ostream& out, size_t first = 0);

}  // namespace adaptiveload
