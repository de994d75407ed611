/* VTA offload from plain C: the quantized ResNet-18 compiled with `heron compile --target vta
   --name r18`, its int8 regions run on a VTA device (the simulator in libheron_vta.a, or the
   driver HERON_VTA_DRIVER names), the rest on this CPU. The VTA pools are device memory from the
   session; the weights come from the .params blob heron wrote. Prints the seven VTA counters.
   Usage: vta_offload R18.vta_constants.params INPUT OUTPUT (float32 .npy files, or raw bytes). */
#include <stdint.h>
#include "r18.h"
#include "heron_vta.h"
#include "../common/io.h"

static _Alignas(HERON_R18_WORKSPACE_ALIGNMENT) uint8_t workspace[HERON_R18_WORKSPACE_WORKSPACE_BUFFER_SIZE];
static uint8_t weights[HERON_R18_VTA_CONSTANTS_PARAMETER_BUFFER_SIZE];
static float input[HERON_R18_INPUT_SIZE];
static float output[HERON_R18_OUTPUT_SIZE];

int main(int argc, char** argv) {
  if (argc != 4) { fprintf(stderr, "usage: %s PARAMS INPUT.npy OUTPUT.npy\n", argv[0]); return 1; }
  read_exact(argv[1], weights, sizeof weights);
  read_input(argv[2], input, HERON_R18_INPUT_SIZE);
  HeronVtaSession* session = heron_vta_session_new(NULL);
  if (!session) { fprintf(stderr, "no VTA session: %s\n", heron_vta_session_last_error()); return 5; }
  uint8_t* vta_workspace = heron_vta_session_alloc(session, HERON_R18_VTA_WORKSPACE_WORKSPACE_BUFFER_SIZE, NULL, 0);
  uint8_t* vta_constants = heron_vta_session_alloc(session, sizeof weights, weights, sizeof weights);
  if (!vta_workspace || !vta_constants) { fprintf(stderr, "%s\n", heron_vta_session_last_error()); return 6; }
  HeronVtaContext* ctx = heron_vta_context_new(session, NULL);
  HeronInputs_r18 inputs = { .input = input };
  HeronOutputs_r18 outputs = { .output = output };
  HeronWorkspaces_r18 workspaces = { .workspace = workspace, .vta_workspace = vta_workspace };
  HeronParameters_r18 parameters = { .vta_constants = vta_constants };
  /* Without a run context the VTA regions cannot run: the plain entry says so. */
  int plain = heron_r18_run(&inputs, &outputs, &workspaces, &parameters);
  if (plain != HERON_ERROR_CONTEXT) {
    fprintf(stderr, "the plain entry returned %d without a context for the VTA regions\n", plain);
    return 7;
  }
  heron_vta_session_counters(session); /* from here on */
  int status = heron_r18_run_ctx(&inputs, &outputs, &workspaces, &parameters, heron_vta_context(ctx));
  const char* error = heron_vta_session_take_error(session);
  if (error) fprintf(stderr, "VTA region failed: %s\n", error);
  check_status("r18", error ? -1 : status);
  const char* counters = heron_vta_session_counters(session);
  printf("vta counters: %s\n", counters ? counters : "(none)");
  write_output(argv[3], output, HERON_R18_OUTPUT_SIZE);
  heron_vta_context_free(ctx);
  heron_vta_session_free(session);
  return 0;
}
