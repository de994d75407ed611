/* File helpers shared by the AOT examples: whole-file reads into caller buffers and writes.
   No heap: every buffer is the caller's. */
#ifndef HERON_EXAMPLE_IO_H
#define HERON_EXAMPLE_IO_H

#include <stdio.h>
#include <stdlib.h>

/* Reads exactly `size` bytes of `path` into `dst`; exits with a message otherwise. */
static void read_exact(const char* path, void* dst, size_t size) {
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
  size_t got = fread(dst, 1, size, f);
  int extra = fgetc(f);
  fclose(f);
  if (got != size || extra != EOF) {
    fprintf(stderr, "%s: expected exactly %zu bytes\n", path, size);
    exit(2);
  }
}

static void write_all(const char* path, const void* src, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(src, 1, size, f) != size) { fprintf(stderr, "cannot write %s\n", path); exit(2); }
  fclose(f);
}

/* Exits with the model's status when a run fails. */
static void check_status(const char* what, int status) {
  if (status != 0) { fprintf(stderr, "%s failed with status %d\n", what, status); exit(3); }
}

#endif
