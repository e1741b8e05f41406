/* A kiln model on a bare-metal Cortex-M4: the typed entry over a static
 * arena, checked against the expected output, results over semihosting.
 *
 * `model_data.h` (written by the test in compiler/tests/c_api/cross.rs)
 * names the model's entry and sizes and holds the input and the expected
 * output; see README.md in this folder for building and running under QEMU.
 */
#include <math.h>
#include <stdio.h>

#include "model_data.h"

/* The arena, aligned as KILN_<MODEL>_ARENA_ALIGN asks (+1: never a zero-size array). */
static unsigned char arena[MODEL_ARENA_BYTES + 1] __attribute__((aligned(64)));
static float output[MODEL_OUTPUT_LEN];

int main(void) {
  float max_err = 0.0f, scale = 0.0f;
  unsigned i;
  int status = MODEL_RUN(model_input, output, arena);
  if (status != KILN_OK) {
    printf("KILN_RESULT error %d: %s\n", status, MODEL_ERROR_STRING(status));
    return 1;
  }
  for (i = 0; i < MODEL_OUTPUT_LEN; i++) {
    float e = fabsf(output[i] - model_expected[i]);
    if (e > max_err) max_err = e;
    if (fabsf(model_expected[i]) > scale) scale = fabsf(model_expected[i]);
  }
  printf("output[0..3] = %g %g %g\n", (double)output[0], (double)output[1], (double)output[2]);
  printf("max abs error %e (scale %e)\n", (double)max_err, (double)scale);
  printf("KILN_RESULT %s\n", max_err <= 1e-4f * scale ? "ok" : "mismatch");
  return 0;
}
