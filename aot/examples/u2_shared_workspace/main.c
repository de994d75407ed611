/* U2: two different models compiled with the same workspace pool name ("shared"); the
   program owns one buffer of the larger size and lends it to both, running them alternately.
   Usage: u2 LENET_IN MLP_IN LENET_OUT MLP_OUT (float32 .npy files, or raw bytes). */
#include <string.h>

#include "lenet.h"
#include "mlp.h"
#include "../common/io.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define SHARED_SIZE MAX(HERON_LENET_SHARED_WORKSPACE_BUFFER_SIZE, HERON_MLP_SHARED_WORKSPACE_BUFFER_SIZE)
#define SHARED_ALIGN MAX(HERON_LENET_SHARED_ALIGNMENT, HERON_MLP_SHARED_ALIGNMENT)

static _Alignas(SHARED_ALIGN) uint8_t shared[SHARED_SIZE];
static float lenet_in[HERON_LENET_INPUT_SIZE], lenet_out[HERON_LENET_FC_22_SIZE], lenet_again[HERON_LENET_FC_22_SIZE];
static float mlp_in[HERON_MLP_INPUT_SIZE], mlp_out[HERON_MLP_SOFTMAX_12_SIZE], mlp_again[HERON_MLP_SOFTMAX_12_SIZE];

static void run_lenet(float* out) {
  HeronInputs_lenet in = { .input = lenet_in };
  HeronOutputs_lenet o = { .fc_22 = out };
  HeronWorkspaces_lenet ws = { .shared = shared };
  check_status("lenet", heron_lenet_run(&in, &o, &ws, NULL));
}

static void run_mlp(float* out) {
  HeronInputs_mlp in = { .input = mlp_in };
  HeronOutputs_mlp o = { .softmax_12 = out };
  HeronWorkspaces_mlp ws = { .shared = shared };
  check_status("mlp", heron_mlp_run(&in, &o, &ws, NULL));
}

int main(int argc, char** argv) {
  if (argc != 5) { fprintf(stderr, "usage: %s LENET_IN MLP_IN LENET_OUT MLP_OUT\n", argv[0]); return 1; }
  read_input(argv[1], lenet_in, HERON_LENET_INPUT_SIZE);
  read_input(argv[2], mlp_in, HERON_MLP_INPUT_SIZE);
  /* Alternate: each run overwrites the other's scratch, and must not care. */
  run_lenet(lenet_out);
  run_mlp(mlp_out);
  run_lenet(lenet_again);
  run_mlp(mlp_again);
  if (memcmp(lenet_out, lenet_again, sizeof lenet_out) || memcmp(mlp_out, mlp_again, sizeof mlp_out)) {
    fprintf(stderr, "results changed between alternating runs\n");
    return 4;
  }
  write_output(argv[3], lenet_out, HERON_LENET_FC_22_SIZE);
  write_output(argv[4], mlp_out, HERON_MLP_SOFTMAX_12_SIZE);
  return 0;
}
