#pragma once
// The words a core message names a planner option in: the CLI's flags ("--sharding fsdp") or
// the Python sampler's arguments ("sharding='fsdp'"), from the one option table
// (planner/option_ranges.cpp, which defines these). Declared here, below every layer, so that
// the manifest readers, the cost models and the strategies can name an option too.
#include <cstdint>
#include <string>

namespace adaptiveload {

// The front end whose words the core's messages speak: the CLI's unless the Python binding,
// when it is loaded, says Python (one front end a process; messages are made in its words).
enum class FrontEnd : uint8_t { kCli, kPython };
void set_front_end(FrontEnd f);
FrontEnd front_end();

// How a message writes an option in the CLI (Python writes `name` or `name=value` for all):
// kLong "--sharding fsdp", kShort "-w", kEquals "--on-duplicate=skip", kBoth "--sp / sp"
// (the flag and the field, for a message both front ends once shared).
enum class Spelling : uint8_t { kLong, kShort, kEquals, kBoth };

// The option `name` (its PlannerConfig field, the table's name): "--mem-budget" in the CLI,
// "mem_budget" in Python ("PlannerConfig.p" for an option the sampler does not take: the
// field of _C.PlannerConfig). A name not in the table is a programming error (std::out_of_range).
std::string option_word(const std::string& name, Spelling s = Spelling::kLong);
// The option set to `value` (the CLI's word for it; an upper-case word such as FILE stands
// for one): "--sharding fsdp" in the CLI; "sharding='fsdp'", "checkpointing=True",
// "drop_last=True", "mem_budget=None", "profile=<file>" in Python.
std::string option_word(const std::string& name, const std::string& value,
                        Spelling s = Spelling::kLong);

}  // namespace adaptiveload
