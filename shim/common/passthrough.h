// Pass-through thunks: what cdsa hands back for a driver entry point it has no wrapper of the right prototype for
// (a version newer than the headers the wrapper table was generated from, or a name those headers lack).
//
// A wrapper needs the exact prototype; an entry point cdsa does not know has none it could trust. Handing back the
// driver's pointer raw would lose the call for good (the program keeps the pointer), so cdsa hands back a thunk
// instead: a few instructions that touch no argument register and no stack slot (x86-64: none at all; aarch64:
// only x16/x17, the intra-procedure-call scratch registers), set the thunk's "called" byte and tail-jump to the
// driver's function. Whatever the prototype, the driver sees exactly the call the program made; a call-and-return
// thunk would move stack arguments and could not be prototype-agnostic.
//
// What the thunk cannot do is see what the call did. Once a thunk whose name can submit work, capture, or change a
// graph or stream has been called, cdsa no longer knows every launch and mark of the process, so no verdict may be
// exact (shim/fault/attribution.h; the report names the entry points). Requested but never called changes nothing
// (cuda-bindings resolves every entry point at import).
//
// Contract: `passthrough_thunk` is thread-safe and lock-free after its first call per (name, version, target)
// (a small mutex guards the allocation), allocation-free (a fixed pool), safe from the dlsym hook. The thunks'
// called bytes are read with plain loads (`passthrough_called`), so a fault path on a dead context can read them.
//
//   void* t = passthrough_thunk("cuLaunchKernel", 13990, real);   // what cuGetProcAddress hands back
//   ((CUresult (*)(...))t)(...);                                  // = real(...), and the thunk is marked called
//   passthrough_called(&out);                                     // {"cuLaunchKernel", 13990, true}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cdsa {

// A thunk bound to `target` for the entry point `name` as requested at `version` (0: by dlsym, no version):
// the same thunk for the same triple. nullptr when the pool is full (then the caller hands `target` back raw and
// the process counts as having called untracked work: passthrough_pool_exhausted).
void* passthrough_thunk(const char* name, int version, void* target) noexcept;

// Whether a call of `name` can submit work, capture, or change a graph or a stream (launch, graph, capture,
// stream, async copy or memset, event, host function, external semaphore): the calls after which cdsa's view of
// the streams may be incomplete. Queries (Get, Query, Is...), attributes and coredump settings cannot.
bool entry_point_changes_work(const char* name) noexcept;

struct PassthroughCall {
  std::string name;
  int version = 0;             // as requested (0: looked up with dlsym)
  bool changes_work = false;   // entry_point_changes_work(name)
};
// The thunks called so far, in the order they were made. Allocates (report path only).
void passthrough_called(std::vector<PassthroughCall>* out);
// A thunk was needed but the pool was full: what cdsa handed back raw may have been called.
bool passthrough_pool_exhausted() noexcept;
// Whether `pc` is the code of one of the thunks (so a wrapper never binds one as "the driver's function").
bool is_passthrough_thunk(const void* pc) noexcept;

}  // namespace cdsa
