// The recorder's setup and its own reports: the tables mapped once at warm-up (each table's file maps its own:
// intern_table.cc, launch_ring.cc, stream_table.cc, handle_maps.cc), the walkers warmed, and what filled up.
// The tables themselves: string_table.cc, stack_table.cc (and reclaim.cc), launch_ring.cc, stream_table.cc,
// handle_maps.cc; a launch's stack: stack_capture.cc.
#include "shim/record/recorder.h"
#include "shim/record/launch_clock.h"

#include <sys/mman.h>
#include <cstdarg>
#include <cstdio>
#include <mutex>

#include "shim/common/config.h"
#include "shim/common/log.h"
#include "shim/record/intern_table_internal.h"

namespace cdsa {
using namespace recorder_internal;

namespace recorder_internal {
std::atomic<bool> g_ready{false};

void* map_zeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

namespace {
std::atomic<bool> g_overflow_logged{false};
}  // namespace
void note_overflow(const char* what) {
  if (!g_overflow_logged.exchange(true))
    log_line("%s: launches are recorded with less detail while it is", what);
}
}  // namespace recorder_internal

namespace {

std::once_flag g_init_once;

void init_tables() {
  const Config& c = config();
  // Room for every stack at a typical depth; deeper stacks use more, and a full arena makes room like a full table.
  bool tables = map_table(g_strings, kMaxStrings, kStringArenaWords, "string table full") &&
                map_table(g_stacks, c.stack_table_size, static_cast<uint64_t>(c.stack_table_size) * 64,
                          "launch stack table full (raise CDSA_STACK_TABLE)");
  const bool ring = map_launch_ring(c.ring_size);
  const bool streams = map_stream_table();
  const bool maps = map_handle_maps();
  if (!tables || !ring || !streams || !maps) {
    log_line("could not map memory for the launch recorder: recording is off");
    return;
  }
  stack_capture_init();
  g_ready.store(true, std::memory_order_release);
}

}  // namespace

bool recorder_init() noexcept {
  launch_clock_init();  // before the first record's stamp
  std::call_once(g_init_once, init_tables);
  return g_ready.load(std::memory_order_acquire);
}

namespace {
// Appends one part of the note to buf (its length *n), after "; " unless it is the first.
__attribute__((format(printf, 4, 5))) void add_part(char* buf, size_t cap, size_t* n, const char* fmt, ...) {
  char part[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(part, sizeof part, fmt, ap);
  va_end(ap);
  int w = snprintf(buf + *n, cap - *n, "%s%s", *n > 0 ? "; " : "", part);
  if (w > 0) *n += static_cast<size_t>(w) < cap - *n ? static_cast<size_t>(w) : cap - *n - 1;
}
}  // namespace

bool stream_table_overflowed() noexcept { return g_stream_table_full.load(std::memory_order_relaxed); }

const char* recorder_overflow_note() noexcept {
  static char buf[768];
  size_t n = 0;
  buf[0] = '\0';
  if (uint64_t r = g_stacks.refused.load(std::memory_order_relaxed))
    add_part(buf, sizeof buf, &n,
             "the launch stack table (%u stacks) was full at times: %llu launch stacks could not be kept, and those "
             "launches are recorded without one (raise CDSA_STACK_TABLE)",
             g_stacks.capacity, static_cast<unsigned long long>(r));
  if (uint64_t r = g_strings.refused.load(std::memory_order_relaxed))
    add_part(buf, sizeof buf, &n,
             "the string table (%u strings) was full at times: %llu kernel names or Python frame texts could not be "
             "kept",
             g_strings.capacity, static_cast<unsigned long long>(r));
  if (g_stream_table_full.load(std::memory_order_relaxed))
    add_part(buf, sizeof buf, &n,
             "the stream table is full (%u streams): launches on streams beyond it are recorded without their "
             "stream's state",
             kStreamCapacity);
  return buf;
}

uint64_t recorder_mapped_bytes() noexcept {
  if (!g_ready.load(std::memory_order_acquire)) return 0;
  return table_bytes(g_strings) + table_bytes(g_stacks) + launch_ring_bytes() + stream_table_bytes() +
         handle_map_bytes();
}

}  // namespace cdsa
