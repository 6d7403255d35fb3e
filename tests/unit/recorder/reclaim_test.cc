// Reclamation of the stack and string tables (shim/record/recorder.h, "Holding ids"): a table far too small
// for the stacks and strings interned (CDSA_STACK_TABLE=256) is reclaimed again and again, and
//   - an id never reads as another entry: stack_at / string_at give the interned content or nothing;
//   - what each kind of holder keeps survives: the ring, a pin (graph nodes), the kernel-name map, the profile,
//     a memo (the native-stack cache), a live stack's Python strings;
//   - unreferenced entries do go, and the holder of a memo finds out (also a launch site's memo on the launch path).
// Labelled `recorder`: the TSan build runs it (8 threads interning and checking each other's ids).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "shim/common/config.h"
#include "shim/common/reentrancy.h"
#include "shim/record/graph_capture.h"
#include "shim/record/profile.h"
#include "shim/record/recorder.h"

namespace cdsa {
namespace {

constexpr int kTable = 256;

// 2^depth distinct stacks: at every level one of two call sites (their return addresses differ), chosen by a bit.
__attribute__((noinline)) uint32_t walk(int depth, uint32_t bits) {
  uint32_t r;
  if (depth == 0) {
    r = capture_and_intern_stack();
    asm volatile("" ::: "memory");
    return r;
  }
  if (bits & 1) {
    r = walk(depth - 1, bits >> 1);
    asm volatile("nop" ::: "memory");
  } else {
    r = walk(depth - 1, bits >> 1);
    asm volatile("nop; nop" ::: "memory");
  }
  return r;
}
constexpr int kDepth = 13;  // 8192 distinct stacks

struct Interned {
  uint32_t id = kUnknownStack;
  std::vector<uintptr_t> native;
};

Interned intern_site(uint32_t bits) {
  Interned out;
  out.id = walk(kDepth, bits);
  Stack s;
  if (out.id != kUnknownStack && stack_at(out.id, &s)) out.native = s.native;
  // The walk's frames only (the caller's differ from one call of intern_site to the next).
  if (out.native.size() > kDepth + 2) out.native.resize(kDepth + 2);
  return out;
}

// Every id either reads as what it was interned as, or reads as nothing.
void expect_exact(const Interned& i) {
  if (i.id == kUnknownStack || i.native.empty()) return;
  Stack s;
  if (stack_at(i.id, &s)) {
    s.native.resize(i.native.size());
    ASSERT_EQ(s.native, i.native) << "id " << i.id << " names another stack";
  }
}

class ReclaimTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("CDSA_STACK_TABLE", std::to_string(kTable).c_str(), 1);
    setenv("CDSA_PROFILE", "1", 1);
    load_config();
    ASSERT_TRUE(recorder_init());
    graph_capture_init();
  }
};

// Interns `n` distinct sites from `threads` threads, each checking its own and the others' ids as it goes.
void churn(uint32_t first, uint32_t n, int threads) {
  std::vector<std::vector<Interned>> seen(static_cast<size_t>(threads));
  std::atomic<int> done{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (uint32_t k = static_cast<uint32_t>(t); k < n; k += static_cast<uint32_t>(threads)) {
        seen[static_cast<size_t>(t)].push_back(intern_site(first + k));
        if (k % 64 == 0)
          for (const auto& i : seen[static_cast<size_t>(t)]) expect_exact(i);
      }
      done.fetch_add(1);
    });
  for (auto& th : ts) th.join();
  for (const auto& v : seen)
    for (const auto& i : v) expect_exact(i);
}

TEST_F(ReclaimTest, ManyMoreStacksThanTheTableHoldsStayExact) {
  uint64_t before = recorder_reclaims();
  churn(0, 4000, 8);
  EXPECT_GT(recorder_reclaims(), before + 4) << "a table of 256 must have been reclaimed many times";
  EXPECT_LE(stack_count(), static_cast<uint32_t>(kTable));
  // New stacks still get ids (the table did not fill for good).
  EXPECT_NE(intern_site(8191).id, kUnknownStack);
}

TEST_F(ReclaimTest, EveryHolderKeepsItsStack) {
  // The ring: a launch record naming a stack.
  Interned in_ring = intern_site(1);
  ASSERT_NE(in_ring.id, kUnknownStack);
  LaunchRecord r;
  r.seq = next_launch_seq();
  r.stack_id = in_ring.id;
  ring_publish(r);
  // A pin, as a graph node or the profile holds it.
  Interned pinned = intern_site(2);
  ASSERT_TRUE(stack_pin(pinned.id));
  // The profile: a (stack, kernel) pair counted once.
  Interned profiled = intern_site(3);
  uint32_t profiled_name = intern_string("profiled_kernel", 15);
  profile_count(profiled.id, profiled_name);
  // A graph captured now, replayed after the churn.
  Interned captured = intern_site(4);
  uint32_t captured_name = intern_string("captured_kernel", 15);
  note_capture_begin(nullptr, false);
  LaunchRecord node;
  node.stack_id = captured.id;
  node.kernel_name = captured_name;
  {
    InCdsa guard;
    note_captured_launch(guard, &node);
  }
  auto fake_graph = reinterpret_cast<CUgraph>(uintptr_t{0x9000});
  note_capture_end(nullptr, false, fake_graph);
  ASSERT_NE(node.graph_id, 0u);
  // A memo, as the native-stack cache keeps one, used again at the end.
  Interned memoed = intern_site(5);
  StackMemo memo = stack_memo(memoed.id);
  ASSERT_NE(memo, kNoStackMemo);
  EXPECT_EQ(stack_memo_id(memo), memoed.id);
  // Nothing holds this one.
  Interned loose = intern_site(6);

  uint64_t before = recorder_reclaims();
  churn(16, 3000, 8);
  ASSERT_GT(recorder_reclaims(), before + 2);

  Stack s;
  auto walked = [&] {
    if (s.native.size() > kDepth + 2) s.native.resize(kDepth + 2);
    return s.native;
  };
  ASSERT_TRUE(stack_at(in_ring.id, &s)) << "the ring's newest record names it";
  EXPECT_EQ(walked(), in_ring.native);
  ASSERT_TRUE(stack_at(pinned.id, &s));
  EXPECT_EQ(walked(), pinned.native);
  ASSERT_TRUE(stack_at(profiled.id, &s));
  EXPECT_EQ(walked(), profiled.native);
  ProfileRows prof;
  ASSERT_TRUE(profile_snapshot(&prof));
  bool found = false;
  for (const auto& row : prof.rows)
    found |= row.stack_id == profiled.id && std::string(string_at(row.kernel_name)) == "profiled_kernel";
  EXPECT_TRUE(found);
  auto nodes = captured_nodes(node.graph_id);
  ASSERT_EQ(nodes.size(), 1u);
  ASSERT_TRUE(stack_at(nodes[0].stack_id, &s)) << "a graph's capture-time stack outlives any churn";
  EXPECT_EQ(walked(), captured.native);
  EXPECT_STREQ(string_at(nodes[0].kernel_name), "captured_kernel");
  // The unheld stack and the unused memo went (their slots now hold other stacks): the memo says so.
  EXPECT_FALSE(stack_at(loose.id, &s));
  EXPECT_FALSE(stack_alive(loose.id));
  EXPECT_EQ(stack_memo_id(memo), kUnknownStack);
  // Interning the memo's site again gives a live id with the same frames.
  Interned again = intern_site(5);
  // (The churn may have left the table full of stacks used in the last two epochs: new ones then wait for
  // a reclamation or two, which a few more inserts bring.)
  for (int i = 0; i < 64 && again.id == kUnknownStack; ++i) again = intern_site(5);
  ASSERT_TRUE(stack_at(again.id, &s));
  EXPECT_EQ(walked(), memoed.native);

  // Dropping the holders lets their stacks go.
  stack_unpin(pinned.id);
  note_graph_destroy(fake_graph);
  churn(8000, 3000, 4);
  EXPECT_FALSE(stack_at(pinned.id, &s));
}

// One launch site taken `rounds` times from one call (the same native stack every time: a loop the compiler cannot
// peel, its bound read through a volatile), with `between` run after each.
__attribute__((noinline)) void one_site_rounds(int n, void (*between)(int, const Interned&)) {
  volatile int rounds = n;
  for (int r = 0; r < rounds; ++r) {
    Interned i = intern_site(7);
    asm volatile("" ::: "memory");
    between(r, i);
  }
}
Interned g_round[3];

// A launch site's memo (kept by the native-stack cache with its entry) names its stack without a look while the
// epoch stays; once reclamations have taken that stack, the same site (served from the cache, memo and all) must be
// interned again, not named by the dead id.
TEST_F(ReclaimTest, ASitesMemoIsNotTakenOnceItsStackWasReclaimed) {
  // Rounds 2 on: the first that interns again (a table full of stacks used in the last two epochs waits for a
  // reclamation or two, which a few more inserts bring).
  one_site_rounds(66, [](int r, const Interned& i) {
    if (r < 2 || g_round[2].id == kUnknownStack) g_round[r < 2 ? r : 2] = i;
    if (r == 1) {
      const uint64_t before = recorder_reclaims();
      churn(20000, 3000, 8);  // other threads: this thread's cache and its memo stay
      EXPECT_GT(recorder_reclaims(), before + 2);
    }
  });
  ASSERT_NE(g_round[0].id, kUnknownStack);
  EXPECT_EQ(g_round[1].id, g_round[0].id) << "served again from the memo within the epoch";
  EXPECT_FALSE(stack_alive(g_round[0].id)) << "nothing held it through the churn";
  ASSERT_NE(g_round[2].id, kUnknownStack);
  Stack s;
  ASSERT_TRUE(stack_at(g_round[2].id, &s)) << "the id the memo gave is dead";
  EXPECT_EQ(g_round[2].native, g_round[0].native);
}

TEST_F(ReclaimTest, StringsAreReclaimedExactlyAndPinnedNamesStay) {
  uint32_t named = intern_string("kernel_in_the_map", 17);
  handle_map_put(HandleMap::KernelName, 0x4242, named);
  uint32_t loose = intern_string("nobody_holds_me", 15);
  constexpr int kThreads = 8, kEach = 40000;  // 320k strings: 2.4 times the string table
  uint64_t before = recorder_reclaims();
  std::vector<std::thread> ts;
  std::atomic<uint64_t> wrong{0}, unknown{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      std::vector<std::pair<uint32_t, std::string>> mine;
      for (int i = 0; i < kEach; ++i) {
        std::string s = "s" + std::to_string(t) + "_" + std::to_string(i) + "_padding_to_make_it_longer";
        uint32_t id = intern_string(s.data(), s.size());
        if (id == kNoString) {
          unknown.fetch_add(1);
          continue;
        }
        if (i % 4 == 0) mine.emplace_back(id, s);
      }
      for (const auto& [id, s] : mine) {
        std::string got;  // string_at's text is stable only while pinned or held: copy it under the seqlock
        if (string_copy(id, &got) && got != s) wrong.fetch_add(1);
      }
    });
  for (auto& th : ts) th.join();
  EXPECT_EQ(wrong.load(), 0u) << "a reclaimed string id read as another string";
  EXPECT_GT(recorder_reclaims(), before);
  // Inserts on 8 threads may outrun a reclamation for a moment (then kNoString), never for good.
  EXPECT_LT(unknown.load(), static_cast<uint64_t>(kThreads) * kEach / 2);
  uint32_t late = intern_string("interned_after_the_churn", 24);
  ASSERT_NE(late, kNoString);
  EXPECT_STREQ(string_at(late), "interned_after_the_churn");
  EXPECT_EQ(handle_map_get(HandleMap::KernelName, 0x4242), named);
  EXPECT_STREQ(string_at(named), "kernel_in_the_map");
  EXPECT_STREQ(string_at(loose), "");
}

// A table full of pinned stacks refuses new ones; the note says how many were refused, and that the table was
// full at times (not that it is full: once the pins go, new stacks are kept again).
TEST_F(ReclaimTest, RefusedStacksAreCountedAndTheTableRecovers) {
  std::vector<uint32_t> pins;
  for (uint32_t bits = 6000; bits < 6000 + 4 * kTable; ++bits) {
    Interned i = intern_site(bits);
    if (i.id == kUnknownStack) break;  // refused: every slot is pinned (or in use)
    if (stack_pin(i.id)) pins.push_back(i.id);
  }
  Interned refused = intern_site(7999);
  for (int i = 0; i < 64 && refused.id != kUnknownStack; ++i) refused = intern_site(7999 - 1 - i);
  EXPECT_EQ(refused.id, kUnknownStack) << "a table full of pinned stacks keeps none more";
  std::string note = recorder_overflow_note();
  EXPECT_NE(note.find("the launch stack table (256 stacks) was full at times: "), std::string::npos) << note;
  EXPECT_NE(note.find(" launch stacks could not be kept, and those launches are recorded without one (raise "
                      "CDSA_STACK_TABLE)"),
            std::string::npos)
      << note;
  for (uint32_t id : pins) stack_unpin(id);
  Interned again = intern_site(7000);
  for (int i = 0; i < 64 && again.id == kUnknownStack; ++i) again = intern_site(7000);
  EXPECT_NE(again.id, kUnknownStack) << "the pins gone, the table keeps new stacks again";
}

TEST_F(ReclaimTest, HoldStopsReclamation) {
  Interned a = intern_site(7);
  recorder_hold_reclaim();
  uint64_t before = recorder_reclaims();
  churn(100, 1000, 2);
  EXPECT_EQ(recorder_reclaims(), before);
  Stack s;
  EXPECT_TRUE(stack_at(a.id, &s));
}

}  // namespace
}  // namespace cdsa
