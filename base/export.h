// Marks a symbol libcdsa.so exports (everything else is built -fvisibility=hidden; shim/exports.map lists the
// names). Only what cdsa interposes, and the CUPTI injection entry point, carries it.
#pragma once

#define CDSA_EXPORT __attribute__((visibility("default")))
