/* A library that prints through stdio, as libcuda prints the device's assert text (deep_bound_stdio_test.cc). */
#include <stdio.h>

__attribute__((visibility("default"))) void deep_printer_line(const char* text) {
  fprintf(stderr, "printer: %s\n", text);
}
