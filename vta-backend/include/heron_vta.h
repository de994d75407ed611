/* heron_vta.h: VTA's driver API (driver.h) and runtime API (runtime.h), implemented by
 * libheron_vta (the heron functional simulator, or the driver library named by
 * HERON_VTA_DRIVER), plus heron_vta_* extras. Names and signatures are VTA's, so a program
 * written against VTA's headers needs only this one:
 *     cc prog.c -I vta-backend/include -L target/release -lheron_vta
 *
 * Unlike VTA's runtime, nothing here aborts on misuse: functions returning a value return a
 * failure code (NULL, 0 or non-zero); void functions record the first error on the command
 * queue, which then refuses further work (VTASynchronize runs nothing) until
 * VTARuntimeShutdown(). heron_vta_last_error() returns the message, or NULL.
 *
 * Handles. Buffer, device, command and uop kernel handles are opaque values checked on every
 * use (they are not addresses: never dereference them). A NULL, freed, forged or garbage handle,
 * or a handle of the wrong kind, is an error; so is freeing twice. Memory a caller may write
 * through (VTAMemAlloc's result, VTABufferCPUPtr's) stays valid until freed; VTAMemFree refuses
 * the memory of buffers and of the command queue. Every copy checks its device side (and a host
 * pointer that lies in device memory) against the live allocation first; other host pointers
 * are the caller's promise.
 *
 * Cycles. wait_cycles (VTADeviceRun, VTASynchronize) and the work limit count simulated work,
 * roughly hardware clocks: 1 per instruction fetched, 1 per micro-op executed (each GEMM or ALU
 * uop at each loop iteration) and 1 per SRAM element a LOAD writes (padding included) or a STORE
 * reads. A run stops before the first instruction that would exceed its limit, with a timeout
 * error (the token queues are cleared; SRAM and DRAM keep what the earlier instructions did).
 * wait_cycles 0 means no limit from the caller. The work limit (default
 * HERON_VTA_DEFAULT_WORK_LIMIT, or HERON_VTA_WORK_LIMIT from the environment at the first call)
 * caps every run whatever wait_cycles says, so an untrusted stream cannot run for long (about
 * 20 s of simulated GEMM at the default). TVM's 1 << 31 is ample: ResNet-18's C2 layer as one
 * stream (115.6 M MACs) takes 0.55 M cycles, a 256^3 blocked GEMM 0.1 M.
 */
#ifndef HERON_VTA_H_
#define HERON_VTA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Hardware configuration (the default: fsim_sample.json) ---- */
#define VTA_LOG_INP_WIDTH 3
#define VTA_LOG_WGT_WIDTH 3
#define VTA_LOG_ACC_WIDTH 5
#define VTA_LOG_BATCH 0
#define VTA_LOG_BLOCK 4
#define VTA_LOG_BLOCK_IN 4
#define VTA_LOG_BLOCK_OUT 4
#define VTA_LOG_UOP_BUFF_SIZE 15
#define VTA_LOG_INP_BUFF_SIZE 15
#define VTA_LOG_WGT_BUFF_SIZE 18
#define VTA_LOG_ACC_BUFF_SIZE 17
#define VTA_BATCH 1
#define VTA_BLOCK_IN 16
#define VTA_BLOCK_OUT 16
#define VTA_INP_WIDTH 8
#define VTA_WGT_WIDTH 8
#define VTA_ACC_WIDTH 32
#define VTA_OUT_WIDTH 8
#define VTA_UOP_BUFF_DEPTH 8192
#define VTA_INP_BUFF_DEPTH 2048
#define VTA_WGT_BUFF_DEPTH 1024
#define VTA_ACC_BUFF_DEPTH 2048
#define VTA_INP_ELEM_BYTES 16
#define VTA_WGT_ELEM_BYTES 256
#define VTA_ACC_ELEM_BYTES 64
#define VTA_OUT_ELEM_BYTES 16
#define VTA_UOP_ELEM_BYTES 4
#define VTA_INS_ELEM_BYTES 16
#define VTA_PAGE_BYTES 4096
#define VTA_MAX_XFER (1 << 25)

/* ---- ISA ---- */
#define VTA_OPCODE_LOAD 0
#define VTA_OPCODE_STORE 1
#define VTA_OPCODE_GEMM 2
#define VTA_OPCODE_FINISH 3
#define VTA_OPCODE_ALU 4

#define VTA_ALU_OPCODE_MIN 0
#define VTA_ALU_OPCODE_MAX 1
#define VTA_ALU_OPCODE_ADD 2
#define VTA_ALU_OPCODE_SHR 3
#define VTA_ALU_OPCODE_MUL 4

#define VTA_MEM_ID_UOP 0
#define VTA_MEM_ID_WGT 1
#define VTA_MEM_ID_INP 2
#define VTA_MEM_ID_ACC 3
#define VTA_MEM_ID_OUT 4
#define VTA_MEM_ID_ACC_8BIT 5

/* ---- Driver API ---- */
#define VTA_CACHED 1
#define VTA_NOT_CACHED 0

typedef void* VTADeviceHandle;
typedef uint32_t vta_phy_addr_t;

VTADeviceHandle VTADeviceAlloc(void);
void VTADeviceFree(VTADeviceHandle handle);
/* Runs insn_count instructions (at most VTA_MAX_XFER / 16) at physical address insn_phy_addr
   within wait_cycles cycles (0: only the work limit) and the work limit; 0 on success, 1 on
   timeout, 2 on any other failure, e.g. a malformed stream (see heron_vta_last_error). */
int VTADeviceRun(VTADeviceHandle device, vta_phy_addr_t insn_phy_addr, uint32_t insn_count, uint32_t wait_cycles);
void* VTAMemAlloc(size_t size, int cached);
void VTAMemFree(void* buf);
vta_phy_addr_t VTAMemGetPhyAddr(void* buf);
void VTAMemCopyFromHost(void* dst, const void* src, size_t size);
void VTAMemCopyToHost(void* dst, const void* src, size_t size);
void VTAFlushCache(void* vir_addr, vta_phy_addr_t phy_addr, int size);
void VTAInvalidateCache(void* vir_addr, vta_phy_addr_t phy_addr, int size);
void VTAProgram(const char* bitstream);

/* ---- Runtime API ---- */
#define VTA_MEMCPY_H2D 1
#define VTA_MEMCPY_D2H 2
#define VTA_MEMCPY_D2D 3
#define VTA_DEBUG_DUMP_INSN (1 << 1)
#define VTA_DEBUG_DUMP_UOP (1 << 2)
#define VTA_DEBUG_SKIP_READ_BARRIER (1 << 3)
#define VTA_DEBUG_SKIP_WRITE_BARRIER (1 << 4)
#define VTA_DEBUG_FORCE_SERIAL (1 << 5)
#define ALLOC_ALIGNMENT 64
/* Queue ids of VTADepPush / VTADepPop. */
#define VTA_QID_LOAD 1
#define VTA_QID_COMPUTE 2
#define VTA_QID_STORE 3

typedef void* VTACommandHandle;

void* VTABufferAlloc(size_t size);
void VTABufferFree(void* buffer);
void VTABufferCopy(const void* from, size_t from_offset, void* to, size_t to_offset, size_t size, int kind_mask);
void* VTABufferCPUPtr(VTACommandHandle cmd, void* buffer);
VTACommandHandle VTATLSCommandHandle(void);
void VTARuntimeShutdown(void);
void VTASetDebugMode(VTACommandHandle cmd, int debug_flag);
void VTAWriteBarrier(VTACommandHandle cmd, void* buffer, uint32_t elem_bits, uint32_t start, uint32_t extent);
void VTAReadBarrier(VTACommandHandle cmd, void* buffer, uint32_t elem_bits, uint32_t start, uint32_t extent);
void VTALoadBuffer2D(VTACommandHandle cmd, void* src_dram_addr, uint32_t src_elem_offset, uint32_t x_size,
                     uint32_t y_size, uint32_t x_stride, uint32_t x_pad_before, uint32_t y_pad_before,
                     uint32_t x_pad_after, uint32_t y_pad_after, uint32_t dst_sram_index,
                     uint32_t dst_memory_type);
void VTAStoreBuffer2D(VTACommandHandle cmd, uint32_t src_sram_index, uint32_t src_memory_type, void* dst_dram_addr,
                      uint32_t dst_elem_offset, uint32_t x_size, uint32_t y_size, uint32_t x_stride);
void VTAUopPush(uint32_t mode, uint32_t reset_out, uint32_t dst_index, uint32_t src_index, uint32_t wgt_index,
                uint32_t opcode, uint32_t use_imm, int32_t imm_val);
void VTAUopLoopBegin(uint32_t extent, uint32_t dst_factor, uint32_t src_factor, uint32_t wgt_factor);
void VTAUopLoopEnd(void);
int VTAPushGEMMOp(void** uop_handle, int (*finit)(void*), void* signature, int nbytes);
int VTAPushALUOp(void** uop_handle, int (*finit)(void*), void* signature, int nbytes);
int VTADepPush(VTACommandHandle cmd, int from_qid, int to_qid);
int VTADepPop(VTACommandHandle cmd, int from_qid, int to_qid);
/* Runs the queued stream within wait_cycles cycles (0: only the work limit); a timeout stops the
   queue like any error ("timed out after N cycles ..."): VTARuntimeShutdown() starts afresh,
   buffers stay valid. */
void VTASynchronize(VTACommandHandle cmd, uint32_t wait_cycles);

/* ---- Heron extras ---- */
/* The last failing call's message, or NULL (cleared by VTARuntimeShutdown and
   heron_vta_clear_error, so a caller can tell whether a void call failed). */
const char* heron_vta_last_error(void);
void heron_vta_clear_error(void);
void heron_vta_profiler_clear(void);
/* {"inp_load_nbytes": .., "wgt_load_nbytes": .., "acc_load_nbytes": .., "uop_load_nbytes": ..,
   "out_store_nbytes": .., "gemm_counter": .., "alu_counter": ..}; valid until the next call. */
const char* heron_vta_profiler_status(void);
/* Bit 0: skip execution (counters still advance, only UOP loads execute). */
void heron_vta_profiler_debug_mode(int flags);
/* Replaces the driver with a shared library exporting the driver API (NULL: the simulator).
   Handles of the old driver's buffers, devices and command queue read as freed afterwards. */
int heron_vta_load_driver(const char* path);
/* The cycles every run may take at most, whatever wait_cycles asks (0: no cap). A loaded driver
   gets the cap as its wait_cycles, in its own unit. */
#define HERON_VTA_DEFAULT_WORK_LIMIT (1ull << 28)
void heron_vta_set_work_limit(uint64_t cycles);

/* ---- Running Heron's AOT objects with VTA regions ----
   An object compiled by `heron compile --target vta` runs its int8 regions through a session:
   a device of the simulator (or of the driver HERON_VTA_DRIVER names) with the device memory of
   the object's VTA pools. Its entry heron_<name>_run_ctx takes the context of
   heron_vta_context_new; heron_<name>_run (no context) returns HERON_ERROR_CONTEXT. The
   context also lists Heron's precompiled CPU kernels (this library carries them), for objects
   compiled with `--kernels` as well.

     HeronVtaSession* s = heron_vta_session_new(NULL);              // default configuration
     void* vws = heron_vta_session_alloc(s, HERON_NET_VTA_WORKSPACE_WORKSPACE_BUFFER_SIZE, NULL, 0);
     void* vcs = heron_vta_session_alloc(s, size, params, size);    // NAME.vta_constants.params
     HeronVtaContext* ctx = heron_vta_context_new(s, NULL);         // or a HeronThreads pool
     rc = heron_net_run_ctx(&in, &out, &workspaces, &parameters, heron_vta_context(ctx));
     if (rc != HERON_OK) ... heron_vta_session_take_error(s) says why a region failed ...
     heron_vta_context_free(ctx); heron_vta_session_free(s);

   Link: cc prog.c net.o libheron_vta.a -lpthread -ldl -lm (libheron_vta.a also holds
   heron_threads_*; do not link libheron_threads.a besides). A session serves one run at a time. */
typedef struct HeronVtaSession HeronVtaSession;
typedef struct HeronVtaContext HeronVtaContext;
struct HeronRunContext;
struct HeronThreads;
/* A hardware configuration (vta_config.json's LOG_ fields; LOG_BLOCK gives both blocks). */
typedef struct HeronVtaConfig {
  uint32_t log_inp_width, log_wgt_width, log_acc_width, log_batch, log_block_in, log_block_out;
  uint32_t log_uop_buff_size, log_inp_buff_size, log_wgt_buff_size, log_acc_buff_size;
} HeronVtaConfig;
/* NULL on error (heron_vta_session_last_error); config NULL: the default (fsim_sample). The
   objects must be compiled for the same configuration (else their regions fail). */
HeronVtaSession* heron_vta_session_new(const HeronVtaConfig* config);
void heron_vta_session_free(HeronVtaSession* session);
/* size bytes of device memory holding init_len bytes from init, then zeros; NULL on error. */
void* heron_vta_session_alloc(HeronVtaSession* session, size_t size, const void* init, size_t init_len);
/* Why the last run's regions stopped (then cleared), or NULL. */
const char* heron_vta_session_take_error(HeronVtaSession* session);
const char* heron_vta_session_last_error(void);
/* The session's counters since the last call (JSON, as heron_vta_profiler_status), then cleared;
   NULL for drivers without counters. */
const char* heron_vta_session_counters(HeronVtaSession* session);
HeronVtaContext* heron_vta_context_new(HeronVtaSession* session, const struct HeronThreads* threads);
const struct HeronRunContext* heron_vta_context(const HeronVtaContext* ctx);
void heron_vta_context_free(HeronVtaContext* ctx);

#ifdef __cplusplus
}
#endif

#endif /* HERON_VTA_H_ */
