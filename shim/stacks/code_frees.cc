// The code-free counter: see code_frees.h for the contract.
#include "shim/stacks/code_frees.h"

#include <link.h>

namespace cdsa::pystack {

std::atomic<uint64_t> g_code_frees{kUncounted};

namespace {

using CodeDealloc = void (*)(void*);
std::atomic<CodeDealloc> g_code_dealloc{nullptr};  // the interpreter's own (or what another layer put there)

void counting_code_dealloc(void* code) {
  g_code_frees.fetch_add(1, std::memory_order_seq_cst);  // before the object's memory can be reused
  g_code_dealloc.load(std::memory_order_acquire)(code);
}

CodeDealloc* g_dealloc_slot = nullptr;  // PyCode_Type's tp_dealloc, once the wrapper is in it

// Whether the word at `addr` lies in a loaded object's writable data: a PT_LOAD segment with PF_W, outside its
// PT_GNU_RELRO range (made read-only after relocation).
bool in_writable_data(const void* addr) {
  struct Query {
    uintptr_t at;
    bool found, writable;
  } q{reinterpret_cast<uintptr_t>(addr), false, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        auto* q = static_cast<Query*>(arg);
        bool in_load = false, writable = false, in_relro = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
          if (q->at < lo || q->at + sizeof(void*) > hi) continue;
          if (ph.p_type == PT_LOAD) in_load = true, writable = (ph.p_flags & PF_W) != 0;
          if (ph.p_type == PT_GNU_RELRO) in_relro = true;
        }
        if (!in_load) return 0;
        q->found = true;
        q->writable = writable && !in_relro;
        return 1;
      },
      &q);
  return q.found && q.writable;
}

}  // namespace

void check_dealloc_slot() noexcept {
  if (code_frees_now() != kUncounted && __atomic_load_n(g_dealloc_slot, __ATOMIC_RELAXED) != &counting_code_dealloc)
    g_code_frees.store(kUncounted, std::memory_order_seq_cst);
}

void count_code_frees(const void* code_type, int32_t tp_dealloc_offset) noexcept {
  auto* type = static_cast<char*>(const_cast<void*>(code_type));
  auto* slot = reinterpret_cast<CodeDealloc*>(type + tp_dealloc_offset);
  if (!in_writable_data(slot)) return;
  CodeDealloc orig = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!orig || orig == &counting_code_dealloc) return;
  g_code_dealloc.store(orig, std::memory_order_release);
  g_dealloc_slot = slot;
  g_code_frees.store(1, std::memory_order_seq_cst);  // no chain reads the count before the walker is Ready
  if (!__atomic_compare_exchange_n(slot, &orig, &counting_code_dealloc, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    g_code_frees.store(kUncounted, std::memory_order_seq_cst);  // another layer changed the slot just now
}

}  // namespace cdsa::pystack
