// The cdsa CLI's commands, one file each (cli/<name>_command.cc), dispatched by the
// table in cli/main.cc over one option parser (cli/options.h).
//
// Contract: each takes the arguments after its name and returns the process exit
// status: 0 success, 1 the input was bad (one message naming it), 2 usage error.
// `cdsa run` does not return when it starts the command (it execs it).
#pragma once

#include <string>
#include <vector>

namespace cdsa::cli {

int main_entry(int argc, char** argv);

// `cdsa --help`: every command's synopsis, then the run options and the CDSA_* variables.
std::string usage_text();

int cmd_run(int argc, char** argv);     // cli/run_command.cc
int cmd_report(int argc, char** argv);  // cli/report_command.cc
int cmd_export(int argc, char** argv);  // cli/export_command.cc
int cmd_merge(int argc, char** argv);   // cli/merge_command.cc
int cmd_flame(int argc, char** argv);   // cli/flame_command.cc
int cmd_top(int argc, char** argv);     // cli/top_command.cc

// `cdsa run`'s options and the variables they set (from shim/common/config_vars.def), for usage_text().
std::string run_options_help();
// Whether `options` are `cdsa run` options only (each with its value), as `cdsa jupyter install ... -- OPTIONS`
// puts them into the kernelspec's `cdsa run`; prints "cdsa COMMAND: ..." and returns false when not.
bool valid_run_options(const std::string& command, const std::vector<std::string>& options);

// doctor (cli/doctor_command.cc): whether cdsa will work here; 0 yes (perhaps with limits), 1 no.
int doctor_command(int argc, char** argv);

// jupyter (cli/jupyter_command.cc): `install` / `uninstall` a kernelspec whose kernel runs under `cdsa run`.
int cmd_jupyter(int argc, char** argv);

}  // namespace cdsa::cli
