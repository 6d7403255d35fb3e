// The cdsa CLI's commands. Each returns the process exit status: 0 success,
// 1 the input was bad (one message naming it), 2 usage error.
#pragma once

#include <string>

namespace cdsa::cli {

int main_entry(int argc, char** argv);

// report, export, merge, flame, top (cli/trace_commands.cc): argv holds the
// arguments after the command name. Returns -1 when `name` is none of them.
int trace_command(const std::string& name, int argc, char** argv);

// doctor (cli/doctor_command.cc): whether cdsa will work here; 0 yes (perhaps with limits), 1 no.
int doctor_command(int argc, char** argv);

}  // namespace cdsa::cli
