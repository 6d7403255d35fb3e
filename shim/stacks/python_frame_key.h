// What the CPython walker (shim/stacks/python_stack.h) captures of one Python frame, as a plain value: the stack table
// (shim/record/) interns stacks by these keys without including the walker.
//
// Contract: a plain struct of two words, trivially copyable; the table stores it byte for byte. Its `code` is
// borrowed: a key is resolved (resolve_python_frame) only by the thread that captured it, in the same native call.
#pragma once

#include <cstdint>

namespace cdsa {

// One captured Python frame: enough to resolve it later *while the frame is
// still alive*, and to guard an intern key.
struct PyFrameKey {
  const void* code;      // PyCodeObject*, borrowed: no reference is held
  int32_t instr_offset;  // byte offset of the current instruction in the code
                         // object's bytecode (co_code_adaptive; 3.10: co_code,
                         // f_lasti * 2); may be -2 for
                         // a frame that has not started (line = co_firstlineno)
  uint32_t code_check;   // python_code_check(code) at capture time (never 0
                         // for a captured frame)
};

}  // namespace cdsa
