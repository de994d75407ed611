/* Drives libheron_vta through its C ABI only, the way a program written against VTA's
   runtime.h and driver.h would: the golden GEMM sequence, ALU ops including fsim's MUL and
   left shifts, ACC_8BIT loads, SRAM contents persisting across runs, kernels recorded once per
   handle and signature, raw streams through the driver API, and error reporting; then misuse:
   NULL, freed, forged and huge arguments, timeouts, and an allocation the host refuses.
   Exits non-zero with a message on the first mismatch. */
#define _DEFAULT_SOURCE /* clock_gettime, setrlimit */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/resource.h>
#include <time.h>

#include "heron_vta.h"

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAILED line %d: ", __LINE__);       \
      fprintf(stderr, __VA_ARGS__);                        \
      const char* e = heron_vta_last_error();              \
      fprintf(stderr, " (last error: %s)\n", e ? e : "none"); \
      exit(1);                                             \
    }                                                      \
  } while (0)

static int finit_calls = 0;

/* GEMM kernels of the golden sequence: signature NULL -> reset kernel, otherwise accumulate. */
static int gemm_reset(void* sig) {
  (void)sig;
  finit_calls++;
  VTAUopLoopBegin(2, 1, 0, 0);
  VTAUopPush(0, 1, 0, 0, 0, 0, 0, 0);
  VTAUopLoopEnd();
  return 0;
}

static int gemm_acc(void* sig) {
  (void)sig;
  finit_calls++;
  VTAUopLoopBegin(2, 1, 1, 0);
  VTAUopPush(0, 0, 0, 0, 0, 0, 0, 0);
  VTAUopLoopEnd();
  return 0;
}

/* ALU kernel over `alu_n` elements: acc[i] = op(acc[i], imm or acc[alu_n + i]). The signature
   selects the variant, so each gets its own recorded kernel. */
static unsigned alu_n;
static int alu_op, alu_use_imm, alu_imm;
static int alu_kernel(void* sig) {
  (void)sig;
  finit_calls++;
  VTAUopLoopBegin(alu_n, 1, 1, 0);
  VTAUopPush(1, 0, 0, alu_n, 0, alu_op, alu_use_imm, alu_imm);
  VTAUopLoopEnd();
  return 0;
}

static int32_t alu_ref(int op, int32_t a, int32_t b) {
  switch (op) {
    case VTA_ALU_OPCODE_MIN: return a < b ? a : b;
    case VTA_ALU_OPCODE_MAX: return a > b ? a : b;
    case VTA_ALU_OPCODE_ADD: return (int32_t)((uint32_t)a + (uint32_t)b);
    case VTA_ALU_OPCODE_SHR: return b >= 0 ? a >> b : (int32_t)((uint32_t)a << -b);
    default: return (int32_t)((uint32_t)a * (uint32_t)b);
  }
}

static long counter(const char* json, const char* key) {
  const char* p = strstr(json, key);
  CHECK(p != NULL, "counter %s missing in %s", key, json);
  return strtol(p + strlen(key) + 3, NULL, 10);
}

static void golden(void) {
  VTACommandHandle cmd = VTATLSCommandHandle();
  CHECK(cmd != NULL, "command handle");
  int8_t x[32], w[256];
  for (int i = 0; i < 32; i++) x[i] = (int8_t)(i * 7 % 23 - 11);
  for (int i = 0; i < 256; i++) w[i] = (int8_t)(i * 5 % 19 - 9);
  void* inp = VTABufferAlloc(32);
  void* wgt = VTABufferAlloc(256);
  void* out = VTABufferAlloc(32);
  VTABufferCopy(x, 0, inp, 0, 32, VTA_MEMCPY_H2D);
  VTABufferCopy(w, 0, wgt, 0, 256, VTA_MEMCPY_H2D);
  heron_vta_profiler_clear();
  static void* reset_handle = NULL;
  static void* acc_handle = NULL;
  VTALoadBuffer2D(cmd, inp, 0, 2, 1, 2, 0, 0, 0, 0, 0, VTA_MEM_ID_INP);
  VTALoadBuffer2D(cmd, wgt, 0, 1, 1, 1, 0, 0, 0, 0, 0, VTA_MEM_ID_WGT);
  CHECK(VTADepPush(cmd, 1, 2) == 0 && VTADepPop(cmd, 1, 2) == 0, "deps");
  CHECK(VTAPushGEMMOp(&reset_handle, gemm_reset, NULL, 0) == 0, "gemm reset");
  CHECK(VTAPushGEMMOp(&acc_handle, gemm_acc, NULL, 0) == 0, "gemm");
  int shifts[3][2] = {{VTA_ALU_OPCODE_SHR, 4}, {VTA_ALU_OPCODE_MAX, 0}, {VTA_ALU_OPCODE_MIN, 127}};
  static void* clip_handles[3];
  for (int k = 0; k < 3; k++) {
    alu_n = 2; /* loop(2, 1, 1, 0) with uop (0, 0): written through the generic ALU kernel */
    alu_op = shifts[k][0], alu_use_imm = 1, alu_imm = shifts[k][1];
    CHECK(VTAPushALUOp(&clip_handles[k], alu_kernel, NULL, 0) == 0, "alu %d", k);
  }
  VTADepPush(cmd, 2, 3);
  VTADepPop(cmd, 2, 3);
  VTAStoreBuffer2D(cmd, 0, VTA_MEM_ID_OUT, out, 0, 2, 1, 2);
  VTASynchronize(cmd, 1u << 31);
  CHECK(heron_vta_last_error() == NULL, "golden sequence ran");
  int8_t y[32];
  VTABufferCopy(out, 0, y, 0, 32, VTA_MEMCPY_D2H);
  /* The ALU uops read acc[alu_n + i] only for tensor ops; with immediates src is unused. */
  for (int r = 0; r < 2; r++)
    for (int o = 0; o < 16; o++) {
      int32_t dot = 0;
      for (int k = 0; k < 16; k++) dot += x[r * 16 + k] * w[o * 16 + k];
      int32_t v = dot >> 4;
      v = v < 0 ? 0 : v > 127 ? 127 : v;
      CHECK(y[r * 16 + o] == (int8_t)v, "gemm output [%d][%d] = %d, want %d", r, o, y[r * 16 + o], v);
    }
  const char* json = heron_vta_profiler_status();
  CHECK(counter(json, "inp_load_nbytes") == 32 && counter(json, "wgt_load_nbytes") == 256 &&
            counter(json, "uop_load_nbytes") == 20 && counter(json, "out_store_nbytes") == 32 &&
            counter(json, "gemm_counter") == 2 && counter(json, "alu_counter") == 6,
        "counters %s", json);
  /* Pushing the same handles again reuses the recorded kernels: no new callbacks. */
  int before = finit_calls;
  CHECK(VTAPushGEMMOp(&acc_handle, gemm_acc, NULL, 0) == 0, "gemm again");
  CHECK(finit_calls == before, "a kernel was recorded twice");
  int sig = 5;
  CHECK(VTAPushGEMMOp(&acc_handle, gemm_acc, &sig, 4) == 0, "gemm with a signature");
  CHECK(finit_calls == before + 1, "a new signature records a new kernel");
  VTASynchronize(cmd, 1u << 31);
  VTABufferFree(inp);
  VTABufferFree(wgt);
  VTABufferFree(out);
}

/* One ALU op over n elements through the runtime API; the result narrowed to int8. */
static void alu_case(int op, int use_imm, int imm, int load8) {
  enum { N = 8 };
  VTACommandHandle cmd = VTATLSCommandHandle();
  int32_t a[2 * N * 16];
  int8_t a8[2 * N * 16];
  for (int i = 0; i < 2 * N * 16; i++) {
    a[i] = (i * 37 % 61) - 30;
    a8[i] = (int8_t)((i * 53 % 255) - 127);
  }
  void* src = VTABufferAlloc(sizeof a);
  void* out = VTABufferAlloc(N * 16);
  if (load8) {
    VTABufferCopy(a8, 0, src, 0, sizeof a8, VTA_MEMCPY_H2D);
    VTALoadBuffer2D(cmd, src, 0, 2 * N, 1, 2 * N, 0, 0, 0, 0, 0, VTA_MEM_ID_ACC_8BIT);
  } else {
    VTABufferCopy(a, 0, src, 0, sizeof a, VTA_MEMCPY_H2D);
    VTALoadBuffer2D(cmd, src, 0, 2 * N, 1, 2 * N, 0, 0, 0, 0, 0, VTA_MEM_ID_ACC);
  }
  static void* handles[8][2][2];
  alu_n = N, alu_op = op, alu_use_imm = use_imm, alu_imm = imm;
  int key = imm + 50; /* one kernel per immediate */
  CHECK(VTAPushALUOp(&handles[op][use_imm][load8], alu_kernel, &key, 4) == 0, "push alu");
  VTADepPush(cmd, 2, 3);
  VTADepPop(cmd, 2, 3);
  VTAStoreBuffer2D(cmd, 0, VTA_MEM_ID_OUT, out, 0, N, 1, N);
  VTASynchronize(cmd, 1u << 31);
  CHECK(heron_vta_last_error() == NULL, "alu op %d ran", op);
  int8_t y[N * 16];
  VTABufferCopy(out, 0, y, 0, sizeof y, VTA_MEMCPY_D2H);
  for (int i = 0; i < N * 16; i++) {
    int32_t x = load8 ? a8[i] : a[i];
    int32_t b = use_imm ? imm : (load8 ? a8[N * 16 + i] : a[N * 16 + i]);
    int8_t want = (int8_t)alu_ref(op, x, b);
    CHECK(y[i] == want, "op %d imm %d lane %d: got %d want %d", op, use_imm, i, y[i], want);
  }
  VTABufferFree(src);
  VTABufferFree(out);
}

/* SRAM keeps its contents between synchronizes: load in one run, compute in the next. */
static void sram_persists(void) {
  VTACommandHandle cmd = VTATLSCommandHandle();
  int32_t a[16];
  for (int i = 0; i < 16; i++) a[i] = 3 * i - 20;
  void* src = VTABufferAlloc(sizeof a);
  void* out = VTABufferAlloc(16);
  VTABufferCopy(a, 0, src, 0, sizeof a, VTA_MEMCPY_H2D);
  VTALoadBuffer2D(cmd, src, 0, 1, 1, 1, 0, 0, 0, 0, 100, VTA_MEM_ID_ACC);
  VTASynchronize(cmd, 1u << 31);
  VTADepPush(cmd, 2, 3);
  VTADepPop(cmd, 2, 3);
  VTAStoreBuffer2D(cmd, 100, VTA_MEM_ID_OUT, out, 0, 1, 1, 1);
  VTASynchronize(cmd, 1u << 31);
  int8_t y[16];
  VTABufferCopy(out, 0, y, 0, 16, VTA_MEMCPY_D2H);
  for (int i = 0; i < 16; i++) CHECK(y[i] == (int8_t)a[i], "persisted lane %d", i);
  VTABufferFree(src);
  VTABufferFree(out);
}

/* Raw streams through the driver API: a FINISH-only stream runs; an undefined opcode and a
   pop that can never be satisfied are errors, not aborts or hangs. */
static void raw_streams(void) {
  VTADeviceHandle dev = VTADeviceAlloc();
  CHECK(dev != NULL, "device");
  uint64_t* insns = (uint64_t*)VTAMemAlloc(64, VTA_CACHED);
  uint64_t stream[4] = {VTA_OPCODE_FINISH, 0, 7, 0};
  VTAMemCopyFromHost(insns, stream, sizeof stream);
  vta_phy_addr_t phys = VTAMemGetPhyAddr(insns);
  CHECK(phys != 0 && phys % 4096 == 0, "physical address %u", phys);
  CHECK(VTADeviceRun(dev, phys, 1, 0) == 0, "FINISH alone");
  CHECK(VTADeviceRun(dev, phys + 16, 1, 0) != 0, "undefined opcode 7 must fail");
  uint64_t waits[2] = {VTA_OPCODE_FINISH | (1u << 3), 0}; /* FINISH popping a token nobody pushes */
  VTAMemCopyFromHost(insns, waits, sizeof waits);
  CHECK(VTADeviceRun(dev, phys, 1, 0) != 0, "deadlock must be detected");
  CHECK(strstr(heron_vta_last_error(), "deadlock") != NULL, "deadlock message");
  CHECK(VTADeviceRun(dev, 0x10, 1, 0) != 0, "a stream outside DRAM");
  VTAMemFree(insns);
  VTADeviceFree(dev);
}

/* Misuse: an error stops the queue until shutdown; then it works again. */
static void errors(void) {
  VTACommandHandle cmd = VTATLSCommandHandle();
  CHECK(VTADepPush(cmd, 1, 3) != 0, "load->store dependency must be refused");
  CHECK(heron_vta_last_error() != NULL, "an error message");
  CHECK(VTADepPush(cmd, 1, 2) != 0, "the queue refuses work after an error");
  VTARuntimeShutdown();
  CHECK(heron_vta_last_error() == NULL, "shutdown clears the error");
  cmd = VTATLSCommandHandle();
  CHECK(VTADepPush(cmd, 1, 2) == 0, "a fresh queue after shutdown");
  VTASynchronize(cmd, 1u << 31);
}

/* ---- Misuse: every call below must fail cleanly (or succeed where noted), never crash. ---- */

/* The last error exists and mentions `what`. */
static void expect_error(const char* what, int line) {
  const char* e = heron_vta_last_error();
  if (e == NULL || strstr(e, what) == NULL) {
    fprintf(stderr, "FAILED line %d: want an error mentioning \"%s\", got %s\n", line, what, e ? e : "none");
    exit(1);
  }
}
#define EXPECT_ERROR(what) expect_error(what, __LINE__)

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* A long ALU kernel: 16383 x 16383 additions to acc[0] (2.7e8 cycles). */
static int long_kernel(void* sig) {
  (void)sig;
  VTAUopLoopBegin(16383, 0, 0, 0);
  VTAUopLoopBegin(16383, 0, 0, 0);
  VTAUopPush(1, 0, 0, 0, 0, VTA_ALU_OPCODE_ADD, 1, 1);
  VTAUopLoopEnd();
  VTAUopLoopEnd();
  return 0;
}

static void huge_and_aliasing_allocations(void) {
  CHECK(VTABufferAlloc(SIZE_MAX) == NULL, "VTABufferAlloc(SIZE_MAX) must fail");
  EXPECT_ERROR("out of simulated DRAM");
  CHECK(VTAMemAlloc(SIZE_MAX, VTA_CACHED) == NULL, "VTAMemAlloc(SIZE_MAX) must fail");
  CHECK(VTAMemAlloc((size_t)1 << 40, VTA_CACHED) == NULL, "VTAMemAlloc(1 << 40) must fail");
  CHECK(VTAMemAlloc((size_t)1 << 32, VTA_CACHED) == NULL, "4 GiB exceed 32-bit physical addresses");
  /* Allocations after the failures are distinct and keep their contents. */
  VTACommandHandle cmd = VTATLSCommandHandle();
  void* a = VTABufferAlloc(4096);
  void* b = VTABufferAlloc(4096);
  uint8_t* m = (uint8_t*)VTAMemAlloc(4096, VTA_CACHED);
  CHECK(a && b && m && a != b, "allocations");
  uint8_t pa[4096], pb[4096], pm[4096], back[4096];
  memset(pa, 0xA1, sizeof pa), memset(pb, 0xB2, sizeof pb), memset(pm, 0xC3, sizeof pm);
  VTABufferCopy(pa, 0, a, 0, sizeof pa, VTA_MEMCPY_H2D);
  VTABufferCopy(pb, 0, b, 0, sizeof pb, VTA_MEMCPY_H2D);
  VTAMemCopyFromHost(m, pm, sizeof pm);
  VTABufferCopy(a, 0, back, 0, sizeof back, VTA_MEMCPY_D2H);
  CHECK(memcmp(back, pa, sizeof pa) == 0, "buffer a was overwritten");
  CHECK(memcmp(VTABufferCPUPtr(cmd, b), pb, sizeof pb) == 0, "buffer b was overwritten");
  CHECK(memcmp(m, pm, sizeof pm) == 0, "VTAMemAlloc memory was overwritten");
  /* Copies past the end, with wrapping offsets or sizes, touch nothing. */
  VTABufferCopy(pa, 0, a, 1, sizeof pa, VTA_MEMCPY_H2D);
  EXPECT_ERROR("overrun");
  VTABufferCopy(pa, 0, a, SIZE_MAX, 2, VTA_MEMCPY_H2D);
  EXPECT_ERROR("overrun");
  VTABufferCopy(a, 0, back, 0, SIZE_MAX, VTA_MEMCPY_D2H);
  EXPECT_ERROR("overrun");
  VTAMemCopyFromHost(m + 4000, pm, 200);
  EXPECT_ERROR("DRAM");
  VTAMemCopyToHost(back, m, SIZE_MAX);
  EXPECT_ERROR("DRAM");
  VTABufferCopy(a, 0, back, 0, sizeof back, VTA_MEMCPY_D2H);
  CHECK(memcmp(back, pa, sizeof pa) == 0, "a failed copy changed buffer a");
  /* A "host" pointer inside device memory is checked against its allocation too. */
  VTABufferCopy(VTABufferCPUPtr(cmd, a), 1, b, 0, 4096, VTA_MEMCPY_H2D);
  EXPECT_ERROR("DRAM");
  heron_vta_clear_error();
  VTABufferCopy(VTABufferCPUPtr(cmd, a), 0, b, 0, 4096, VTA_MEMCPY_H2D);
  CHECK(heron_vta_last_error() == NULL && memcmp(VTABufferCPUPtr(cmd, b), pa, sizeof pa) == 0, "copy a to b");
  VTAMemFree(VTABufferCPUPtr(cmd, a));
  EXPECT_ERROR("VTABufferFree");
  VTABufferFree(a);
  VTABufferFree(b);
  VTAMemFree(m);
  VTAMemFree(m);
  EXPECT_ERROR("not a buffer allocated by this driver");
  VTAMemCopyFromHost(m, pm, 16);
  EXPECT_ERROR("not a buffer allocated by this driver");
  CHECK(VTAMemGetPhyAddr(m) == 0, "a freed pointer has no physical address");
}

static void bad_handles(void) {
  VTACommandHandle cmd = VTATLSCommandHandle();
  uint8_t host[64] = {0};
  void* buf = VTABufferAlloc(64);
  void* forged = (void*)((uintptr_t)buf + 1000); /* never issued */
  void* garbage = (void*)(uintptr_t)0xdeadbeef;
  VTABufferFree(buf);
  /* A freed handle: copies, frees and lookups are errors, nothing is written. */
  VTABufferCopy(host, 0, buf, 0, sizeof host, VTA_MEMCPY_H2D);
  EXPECT_ERROR("freed");
  VTABufferCopy(buf, 0, host, 0, sizeof host, VTA_MEMCPY_D2H);
  EXPECT_ERROR("freed");
  VTABufferFree(buf);
  EXPECT_ERROR("freed");
  CHECK(VTABufferCPUPtr(cmd, buf) == NULL, "CPU pointer of a freed buffer");
  VTABufferFree(forged);
  EXPECT_ERROR("not issued");
  VTABufferFree(garbage);
  EXPECT_ERROR("not issued");
  VTABufferFree(NULL);
  EXPECT_ERROR("NULL");
  VTABufferCopy(garbage, 0, host, 0, sizeof host, VTA_MEMCPY_D2H);
  EXPECT_ERROR("not a buffer");
  VTABufferCopy(host, 0, NULL, 0, sizeof host, VTA_MEMCPY_H2D);
  CHECK(heron_vta_last_error() != NULL, "copy to NULL");
  /* Devices. */
  VTADeviceHandle dev = VTADeviceAlloc();
  VTADeviceFree(dev);
  VTADeviceFree(dev);
  EXPECT_ERROR("freed");
  CHECK(VTADeviceRun(dev, 0x1000, 1, 0) == 2, "run on a freed device");
  CHECK(VTADeviceRun(garbage, 0x1000, 1, 0) == 2, "run on a garbage device");
  CHECK(VTADeviceRun(buf, 0x1000, 1, 0) == 2, "a buffer handle is no device");
  EXPECT_ERROR("another kind");
  /* Uop kernel handles: NULL slot pointer, garbage in the slot, another kind of handle. */
  void* slot = garbage;
  CHECK(VTAPushGEMMOp(&slot, gemm_acc, NULL, 0) != 0, "garbage uop handle");
  EXPECT_ERROR("uop kernel handle");
  VTARuntimeShutdown();
  cmd = VTATLSCommandHandle();
  slot = buf;
  CHECK(VTAPushGEMMOp(&slot, gemm_acc, NULL, 0) != 0, "a buffer handle as uop handle");
  VTARuntimeShutdown();
  cmd = VTATLSCommandHandle();
  CHECK(VTAPushALUOp(NULL, alu_kernel, NULL, 0) != 0, "NULL uop handle");
  VTARuntimeShutdown();
  /* Command handles: NULL, garbage, and one that went stale at shutdown. */
  VTACommandHandle stale = VTATLSCommandHandle();
  VTARuntimeShutdown();
  cmd = VTATLSCommandHandle();
  CHECK(cmd != stale, "a new queue gets a new handle");
  VTASynchronize(stale, 1u << 31);
  EXPECT_ERROR("freed");
  VTARuntimeShutdown();
  cmd = VTATLSCommandHandle();
  CHECK(VTADepPush(NULL, 1, 2) != 0, "NULL command handle");
  VTARuntimeShutdown();
  cmd = VTATLSCommandHandle();
  VTALoadBuffer2D(cmd, garbage, 0, 1, 1, 1, 0, 0, 0, 0, 0, VTA_MEM_ID_INP);
  EXPECT_ERROR("not a buffer");
  CHECK(VTADepPush(cmd, 1, 2) != 0, "a bad load stops the queue");
  VTARuntimeShutdown();
  cmd = VTATLSCommandHandle();
  CHECK(VTADepPush(cmd, 1, 2) == 0, "the queue works after shutdown");
  VTASynchronize(cmd, 1u << 31);
  CHECK(heron_vta_last_error() == NULL, "synchronize after the misuse");
}

/* VTASynchronize(cmd, 1000) on a long kernel returns at once with a timeout; after
   VTARuntimeShutdown the runtime and the buffers work again. The work limit does the same for
   wait_cycles 0, and VTADeviceRun reports a timeout as 1. */
static void timeouts(void) {
  VTACommandHandle cmd = VTATLSCommandHandle();
  int32_t acc[16] = {5};
  void* src = VTABufferAlloc(sizeof acc);
  void* out = VTABufferAlloc(16);
  VTABufferCopy(acc, 0, src, 0, sizeof acc, VTA_MEMCPY_H2D);
  static void* long_handle = NULL;
  double started = now_ms();
  VTALoadBuffer2D(cmd, src, 0, 1, 1, 1, 0, 0, 0, 0, 0, VTA_MEM_ID_ACC);
  CHECK(VTAPushALUOp(&long_handle, long_kernel, NULL, 0) == 0, "push the long kernel");
  VTASynchronize(cmd, 1000);
  double took = now_ms() - started;
  EXPECT_ERROR("timed out after");
  EXPECT_ERROR("limit of 1000");
  CHECK(took < 100, "the timeout took %.1f ms", took);
  printf("c api: VTASynchronize(cmd, 1000) on a 2.7e8-cycle kernel returned in %.3f ms: %s\n", took,
         heron_vta_last_error());
  CHECK(VTADepPush(cmd, 1, 2) != 0, "the queue is stopped after a timeout");
  VTARuntimeShutdown();
  cmd = VTATLSCommandHandle();
  /* The work limit cuts the same kernel with no wait_cycles from the caller. */
  heron_vta_set_work_limit(5000);
  VTALoadBuffer2D(cmd, src, 0, 1, 1, 1, 0, 0, 0, 0, 0, VTA_MEM_ID_ACC);
  CHECK(VTAPushALUOp(&long_handle, long_kernel, NULL, 0) == 0, "push the long kernel again");
  VTASynchronize(cmd, 0);
  EXPECT_ERROR("limit of 5000");
  heron_vta_set_work_limit(HERON_VTA_DEFAULT_WORK_LIMIT);
  VTARuntimeShutdown();
  cmd = VTATLSCommandHandle();
  alu_n = 1, alu_op = VTA_ALU_OPCODE_ADD, alu_use_imm = 1, alu_imm = 3;
  static void* add_handle = NULL;
  VTALoadBuffer2D(cmd, src, 0, 1, 1, 1, 0, 0, 0, 0, 0, VTA_MEM_ID_ACC);
  CHECK(VTAPushALUOp(&add_handle, alu_kernel, NULL, 0) == 0, "push a short kernel");
  VTADepPush(cmd, 2, 3);
  VTADepPop(cmd, 2, 3);
  VTAStoreBuffer2D(cmd, 0, VTA_MEM_ID_OUT, out, 0, 1, 1, 1);
  VTASynchronize(cmd, 1u << 31);
  CHECK(heron_vta_last_error() == NULL, "a short kernel after the timeouts");
  int8_t y[16];
  VTABufferCopy(out, 0, y, 0, sizeof y, VTA_MEMCPY_D2H);
  CHECK(y[0] == 8, "5 + 3 = %d", y[0]);
  /* The driver API: a raw GEMM of 16383 x 16383 uops. */
  VTADeviceHandle dev = VTADeviceAlloc();
  uint64_t* insns = (uint64_t*)VTAMemAlloc(32, VTA_CACHED);
  uint64_t gemm = VTA_OPCODE_GEMM | (uint64_t)1 << 21 | (uint64_t)16383 << 35 | (uint64_t)16383 << 49;
  uint64_t stream[4] = {gemm, 0, VTA_OPCODE_FINISH, 0};
  VTAMemCopyFromHost(insns, stream, sizeof stream);
  started = now_ms();
  CHECK(VTADeviceRun(dev, VTAMemGetPhyAddr(insns), 2, 1000) == 1, "a timeout is 1");
  CHECK(now_ms() - started < 100, "VTADeviceRun's timeout took %.1f ms", now_ms() - started);
  EXPECT_ERROR("timed out");
  VTAMemFree(insns);
  VTADeviceFree(dev);
  VTABufferFree(src);
  VTABufferFree(out);
}

/* With the address space capped, an allocation the host cannot make is NULL, not an abort. */
static void host_refuses(void) {
  struct rlimit old;
  CHECK(getrlimit(RLIMIT_AS, &old) == 0, "getrlimit");
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0;
  CHECK(f && fscanf(f, "%ld", &pages) == 1, "read /proc/self/statm");
  fclose(f);
  struct rlimit low = old;
  low.rlim_cur = (rlim_t)pages * 4096 + ((rlim_t)512 << 20);
  CHECK(setrlimit(RLIMIT_AS, &low) == 0, "setrlimit");
  void* big = VTAMemAlloc((size_t)3 << 30, VTA_CACHED);
  void* small = VTAMemAlloc(1 << 20, VTA_CACHED);
  CHECK(setrlimit(RLIMIT_AS, &old) == 0, "restore the limit");
  CHECK(big == NULL, "3 GiB under a capped address space");
  EXPECT_ERROR("host cannot allocate");
  CHECK(small != NULL, "1 MiB still fits");
  VTAMemFree(small);
}

/* Run with HERON_VTA_WORK_LIMIT=5000 in the environment: the limit applies from the first call. */
static void work_limit_from_environment(void) {
  VTACommandHandle cmd = VTATLSCommandHandle();
  static void* long_handle = NULL;
  CHECK(VTAPushALUOp(&long_handle, long_kernel, NULL, 0) == 0, "push the long kernel");
  VTASynchronize(cmd, 0);
  EXPECT_ERROR("limit of 5000");
  printf("c api: HERON_VTA_WORK_LIMIT applies\n");
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "work-limit-from-environment") == 0) {
    work_limit_from_environment();
    return 0;
  }
  golden();
  int ops[5] = {VTA_ALU_OPCODE_MIN, VTA_ALU_OPCODE_MAX, VTA_ALU_OPCODE_ADD, VTA_ALU_OPCODE_SHR, VTA_ALU_OPCODE_MUL};
  for (int k = 0; k < 5; k++) {
    int imm = ops[k] == VTA_ALU_OPCODE_SHR ? -3 : 7; /* a negative shift is a left shift */
    alu_case(ops[k], 1, imm, 0);
    alu_case(ops[k], 0, 0, 0);
    alu_case(ops[k], 1, ops[k] == VTA_ALU_OPCODE_SHR ? 2 : -5, 1); /* ACC_8BIT sources */
  }
  sram_persists();
  raw_streams();
  errors();
  huge_and_aliasing_allocations();
  bad_handles();
  timeouts();
  host_refuses();
  VTARuntimeShutdown();
  printf("c api: all checks passed\n");
  return 0;
}
