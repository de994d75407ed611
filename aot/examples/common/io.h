/* File helpers shared by the AOT examples: whole-file reads into caller buffers and writes,
   as raw little-endian bytes or as numpy .npy files (float32, C order). No heap: every buffer
   is the caller's. */
#ifndef HERON_EXAMPLE_IO_H
#define HERON_EXAMPLE_IO_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char* path, const char* why) {
  fprintf(stderr, "%s: %s\n", path, why);
  exit(2);
}

/* Reads exactly `size` bytes of `path` into `dst`; exits with a message otherwise. */
static void read_exact(const char* path, void* dst, size_t size) {
  FILE* f = fopen(path, "rb");
  if (!f) fail(path, "cannot open");
  size_t got = fread(dst, 1, size, f);
  int extra = fgetc(f);
  fclose(f);
  if (got != size || extra != EOF) {
    fprintf(stderr, "%s: expected exactly %zu bytes\n", path, size);
    exit(2);
  }
}

static int ends_with_npy(const char* path) {
  size_t n = strlen(path);
  return n >= 4 && strcmp(path + n - 4, ".npy") == 0;
}

/* Reads `count` float32 values: from a .npy file (numpy's format, versions 1-3, '<f4' data in
   C order holding exactly `count` elements, whatever its shape), or from exactly
   `count * 4` raw little-endian bytes when the name does not end in .npy. Other dtypes are
   refused with the one-line conversion: np.save(path, x.astype(np.float32)). */
static void read_input(const char* path, float* dst, size_t count) {
  if (!ends_with_npy(path)) {
    read_exact(path, dst, count * sizeof(float));
    return;
  }
  static char header[65536];
  unsigned char prefix[12];
  FILE* f = fopen(path, "rb");
  if (!f) fail(path, "cannot open");
  if (fread(prefix, 1, 8, f) != 8 || memcmp(prefix, "\x93NUMPY", 6) != 0) fail(path, "not a .npy file");
  size_t header_len;
  if (prefix[6] == 1) {
    if (fread(prefix + 8, 1, 2, f) != 2) fail(path, "truncated .npy header");
    header_len = (size_t)prefix[8] | (size_t)prefix[9] << 8;
  } else if (prefix[6] == 2 || prefix[6] == 3) {
    if (fread(prefix + 8, 1, 4, f) != 4) fail(path, "truncated .npy header");
    header_len = (size_t)prefix[8] | (size_t)prefix[9] << 8 | (size_t)prefix[10] << 16 | (size_t)prefix[11] << 24;
  } else {
    fail(path, "unknown .npy format version");
  }
  if (header_len >= sizeof header) fail(path, ".npy header too long");
  if (fread(header, 1, header_len, f) != header_len) fail(path, "truncated .npy header");
  header[header_len] = '\0';
  if (!strstr(header, "'descr': '<f4'"))
    fail(path, "must hold float32 data ('<f4'); convert with numpy: np.save(path, x.astype(np.float32))");
  if (strstr(header, "'fortran_order': True")) fail(path, "must be in C order; np.save(path, np.ascontiguousarray(x))");
  size_t got = fread(dst, sizeof(float), count, f);
  int extra = fgetc(f);
  fclose(f);
  if (got != count || extra != EOF) {
    fprintf(stderr, "%s: expected exactly %zu float32 elements\n", path, count);
    exit(2);
  }
}

static void write_all(const char* path, const void* src, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(src, 1, size, f) != size) fail(path, "cannot write");
  if (fclose(f) != 0) fail(path, "cannot write");
}

/* Writes `count` float32 values: as a .npy file of shape (count,) when the name ends in .npy
   (np.load reads it; reshape to the output's shape), else as raw little-endian bytes. */
static void write_output(const char* path, const float* src, size_t count) {
  if (!ends_with_npy(path)) {
    write_all(path, src, count * sizeof(float));
    return;
  }
  char header[128];
  int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu,), }", count);
  /* Magic, version, length, header padded with spaces to a multiple of 64, ending in '\n'. */
  size_t total = 10 + (size_t)len + 1;
  size_t padded = (total + 63) / 64 * 64;
  FILE* f = fopen(path, "wb");
  if (!f) fail(path, "cannot write");
  unsigned short header_len = (unsigned short)(padded - 10);
  unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header_len & 0xff),
                              (unsigned char)(header_len >> 8)};
  int ok = fwrite(prefix, 1, 10, f) == 10 && fwrite(header, 1, (size_t)len, f) == (size_t)len;
  for (size_t i = 10 + (size_t)len; ok && i + 1 < padded; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF && fwrite(src, sizeof(float), count, f) == count;
  if (fclose(f) != 0 || !ok) fail(path, "cannot write");
}

/* Exits with the model's status when a run fails. */
static void check_status(const char* what, int status) {
  if (status != 0) { fprintf(stderr, "%s failed with status %d\n", what, status); exit(3); }
}

#endif
