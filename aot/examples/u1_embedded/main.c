/* U1: one model, workspace and constants embedded in the object. The program links lenet.o
   and nothing else: no allocator, no pools to manage.
   Usage: u1 INPUT OUTPUT: float32 as .npy files, or raw little-endian bytes (any other name). */
#include "lenet.h"
#include "../common/io.h"

static float input[HERON_LENET_INPUT_SIZE];
static float output[HERON_LENET_FC_22_SIZE];

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: %s INPUT.npy OUTPUT.npy\n", argv[0]); return 1; }
  read_input(argv[1], input, HERON_LENET_INPUT_SIZE);
  HeronInputs_lenet inputs = { .input = input };
  HeronOutputs_lenet outputs = { .fc_22 = output };
  /* Both pools are embedded: no workspace or parameter structs to pass. */
  check_status("lenet", heron_lenet_run(&inputs, &outputs, NULL, NULL));
  /* A NULL output pointer is refused, not dereferenced. */
  HeronOutputs_lenet broken = { .fc_22 = NULL };
  if (heron_lenet_run(&inputs, &broken, NULL, NULL) != HERON_ERROR_ARGUMENT) {
    fprintf(stderr, "a NULL output was not rejected\n");
    return 4;
  }
  write_output(argv[2], output, HERON_LENET_FC_22_SIZE);
  return 0;
}
