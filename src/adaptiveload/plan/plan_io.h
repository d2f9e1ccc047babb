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
void write_plan_jsonl(const Plan& plan, std::ostream& out, size_t first = 0);

}  // namespace adaptiveload
