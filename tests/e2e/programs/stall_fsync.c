// A file system that stalls (a hung network mount): fsync sleeps for a minute. Preloaded before libcdsa.so by
// test_report_first.py, it holds up the trace file's write, never the report, which must be out first.
#include <unistd.h>

int fsync(int fd) {
  (void)fd;
  sleep(60);
  return 0;
}
