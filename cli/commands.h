// The cdsa CLI's commands. Each returns the process exit status: 0 success,
// 1 the input was bad (one message naming it), 2 usage error.
#pragma once

namespace cdsa::cli {

int main_entry(int argc, char** argv);

}  // namespace cdsa::cli
