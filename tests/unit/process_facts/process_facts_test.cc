// The process facts (shim/fault/process_facts.h): the rank, world size and local rank each read from the first
// variable of their list that holds a usable value, read when asked; and the trace path policy: CDSA_TRACE_FILE's
// %h %p %r %R %t %% expanded, every other % kept, and the default name with and without a rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "shim/common/config.h"
#include "shim/fault/process_facts.h"

namespace cdsa {
namespace {

const char* const kRankVars[] = {"RANK",     "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                 "LOCAL_RANK", "SLURM_LOCALID", "WORLD_SIZE",          "SLURM_NTASKS",
                                 "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};

class ProcessFacts : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kRankVars) unsetenv(v);
  }
  void TearDown() override { SetUp(); }
};

TEST(TracePattern, ExpandsEachDirective) {
  EXPECT_EQ(expand_trace_pattern("cdsa-%h%R-%p.json", "node7", 1234, -1, 0), "cdsa-node7-1234.json");
  EXPECT_EQ(expand_trace_pattern("cdsa-%h%R-%p.json", "node7", 1234, 3, 0), "cdsa-node7-rank3-1234.json");
  EXPECT_EQ(expand_trace_pattern("/t/%r/%t.json", "h", 1, 0, 1764590000), "/t/0/1764590000.json");
  EXPECT_EQ(expand_trace_pattern("/t/%r.json", "h", 1, -1, 0), "/t/norank.json");
  EXPECT_EQ(expand_trace_pattern("100%%-%h", "h", 1, -1, 0), "100%-h");
}

TEST(TracePattern, KeepsWhatItDoesNotKnow) {
  EXPECT_EQ(expand_trace_pattern("a%xb%", "h", 1, 2, 3), "a%xb%");  // unknown directive, % at the end
  EXPECT_EQ(expand_trace_pattern("%", "h", 1, 2, 3), "%");
  EXPECT_EQ(expand_trace_pattern("", "h", 1, 2, 3), "");
  EXPECT_EQ(expand_trace_pattern("%h", "", 1, 2, 3), "");  // no host name: nothing in its place
}

TEST_F(ProcessFacts, RankFallsBackInOrderAndSkipsBadValues) {
  EXPECT_EQ(process_rank(), -1);
  setenv("LOCAL_RANK", "5", 1);
  EXPECT_EQ(process_rank(), 5);  // the last resort
  setenv("PMIX_RANK", "4", 1);
  EXPECT_EQ(process_rank(), 4);
  setenv("SLURM_PROCID", "2", 1);
  EXPECT_EQ(process_rank(), 2);
  setenv("RANK", "", 1);  // empty, negative, not a number, too large: as if unset
  EXPECT_EQ(process_rank(), 2);
  setenv("RANK", "-1", 1);
  EXPECT_EQ(process_rank(), 2);
  setenv("RANK", "3x", 1);
  EXPECT_EQ(process_rank(), 2);
  setenv("RANK", "9999999999", 1);
  EXPECT_EQ(process_rank(), 2);
  setenv("RANK", "0", 1);
  EXPECT_EQ(process_rank(), 0);  // rank 0 is a rank
}

TEST_F(ProcessFacts, WorldSizeAndLocalRank) {
  EXPECT_EQ(process_world_size(), -1);
  EXPECT_EQ(process_local_rank(), -1);
  setenv("PMI_SIZE", "16", 1);
  EXPECT_EQ(process_world_size(), 16);
  setenv("WORLD_SIZE", "0", 1);  // a world of 0 processes is no answer
  EXPECT_EQ(process_world_size(), 16);
  setenv("WORLD_SIZE", "8", 1);
  EXPECT_EQ(process_world_size(), 8);
  setenv("SLURM_LOCALID", "1", 1);
  EXPECT_EQ(process_local_rank(), 1);
  setenv("LOCAL_RANK", "0", 1);
  EXPECT_EQ(process_local_rank(), 0);
}

TEST_F(ProcessFacts, TracePathForThisProcessReadsTheRankWhenAsked) {
  ASSERT_EQ(std::string(config().trace_pattern), "cdsa-%h%R-%p.json");  // the default (CDSA_TRACE_FILE unset)
  const std::string host = host_name();
  ASSERT_FALSE(host.empty());
  const std::string pid = std::to_string(getpid());
  EXPECT_EQ(trace_path_for_process(0), "cdsa-" + host + "-" + pid + ".json");
  setenv("SLURM_PROCID", "7", 1);  // set after start, as a launcher or the program may
  EXPECT_EQ(trace_path_for_process(0), "cdsa-" + host + "-rank7-" + pid + ".json");
}

TEST_F(ProcessFacts, FactsOfThisProcess) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  report::Process p = process_facts(42);
  EXPECT_EQ(p.pid, getpid());
  EXPECT_EQ(p.host, host_name());
  EXPECT_EQ(p.start_time_unix_ns, 42u);
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.world_size, 2);
  EXPECT_EQ(p.local_rank, -1);
  ASSERT_FALSE(p.argv.empty());
  EXPECT_NE(p.argv[0].find("process_facts_test"), std::string::npos);
  EXPECT_EQ(p.driver_version, 0);  // no driver loaded in this test
  EXPECT_EQ(p.gpu, "");
}

}  // namespace
}  // namespace cdsa
