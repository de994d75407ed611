/* U3: two workspace pools — a small fast "sram" with a size hint and a large "dram" that takes
   whatever does not fit — and the weights in a user-provided "flash" parameter pool, loaded
   from the .params blob heron wrote.
   Usage: u3 NET.flash.params INPUT OUTPUT (float32 .npy files, or raw bytes). */
#include "net.h"
#include "../common/io.h"

static _Alignas(HERON_NET_SRAM_ALIGNMENT) uint8_t sram[HERON_NET_SRAM_WORKSPACE_BUFFER_SIZE];
static _Alignas(HERON_NET_DRAM_ALIGNMENT) uint8_t dram[HERON_NET_DRAM_WORKSPACE_BUFFER_SIZE];
static _Alignas(HERON_NET_FLASH_ALIGNMENT) uint8_t flash[HERON_NET_FLASH_PARAMETER_BUFFER_SIZE];
static float input[HERON_NET_INPUT_SIZE];
static float output[HERON_NET_FC_111_SIZE];

int main(int argc, char** argv) {
  if (argc != 4) { fprintf(stderr, "usage: %s PARAMS INPUT.npy OUTPUT.npy\n", argv[0]); return 1; }
  read_exact(argv[1], flash, sizeof flash);
  read_input(argv[2], input, HERON_NET_INPUT_SIZE);
  HeronInputs_net inputs = { .input = input };
  HeronOutputs_net outputs = { .fc_111 = output };
  HeronWorkspaces_net workspaces = { .sram = sram, .dram = dram };
  HeronParameters_net parameters = { .flash = flash };
  check_status("net", heron_net_run(&inputs, &outputs, &workspaces, &parameters));
  /* Required pools cannot be left out. */
  if (heron_net_run(&inputs, &outputs, &workspaces, NULL) != HERON_ERROR_ARGUMENT) {
    fprintf(stderr, "missing parameters were not rejected\n");
    return 4;
  }
  write_output(argv[3], output, HERON_NET_FC_111_SIZE);
  return 0;
}
