/* Run a model compiled by kiln through its packed entry (DLPack tensors),
 * with nothing but the model's header and static library.
 *
 * Each input is read from a raw file (the tensor's bytes, row-major, native
 * endianness) and each output written to one. KILN_MODEL is the name given to
 * `kiln::Build::new`; the header and `libkiln_<model>.a` are in `$OUT_DIR/kiln`:
 *
 *   cc -O2 -DKILN_MODEL=mlp -I"$OUT_DIR/kiln" examples/c/run_model.c \
 *      -L"$OUT_DIR/kiln" -lkiln_mlp -lm -o run_mlp
 *   ./run_mlp x.bin y.bin        # inputs, then outputs
 *
 * The program discovers the model with kiln_<model>_describe() (printed to
 * stderr) and reports a failed call with kiln_<model>_error_string().
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
#define KILN_FN2(model, f) kiln_##model##_##f
#define KILN_FN(model, f) KILN_FN2(model, f)

#include KILN_STR(KILN_MODEL.h)

/* A tensor's bytes, from its shape and dtype. */
static size_t tensor_bytes(const kiln_tensor_info* t) {
  size_t n = (size_t)t->dtype.bits / 8u * t->dtype.lanes;
  int32_t d;
  for (d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

/* A compact CPU tensor of `info`'s shape and dtype over `data`. */
static DLTensor dl_tensor(const kiln_tensor_info* info, void* data) {
  DLTensor t;
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = info->ndim;
  t.dtype = info->dtype;
  t.shape = (int64_t*)info->shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

int main(int argc, char** argv) {
  const kiln_model_info* m = KILN_FN(KILN_MODEL, describe)();
  DLTensor tensors[64];
  unsigned char *raw_arena, *arena;
  int i, status;
  if (m->num_inputs + m->num_outputs > 64 || argc != 1 + m->num_inputs + m->num_outputs) {
    fprintf(stderr, "usage: %s", argv[0]);
    for (i = 0; i < m->num_inputs; i++) fprintf(stderr, " %s.bin", m->inputs[i].name);
    for (i = 0; i < m->num_outputs; i++) fprintf(stderr, " %s.bin", m->outputs[i].name);
    fprintf(stderr, "\n");
    return 2;
  }
  fprintf(stderr, "model %s (target %s), arena %llu bytes\n", m->name, m->target,
          (unsigned long long)m->arena_bytes);
  for (i = 0; i < m->num_inputs + m->num_outputs; i++) {
    int output = i >= m->num_inputs;
    const kiln_tensor_info* info = output ? &m->outputs[i - m->num_inputs] : &m->inputs[i];
    size_t bytes = tensor_bytes(info);
    /* malloc aligns to the largest scalar type, enough for every element type. */
    void* data = malloc(bytes ? bytes : 1);
    fprintf(stderr, "  %s %s: %d-d, %zu bytes\n", output ? "output" : "input", info->name, (int)info->ndim, bytes);
    if (data == NULL) return 3;
    if (!output) {
      FILE* f = fopen(argv[1 + i], "rb");
      if (f == NULL || fread(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "%s: cannot read %zu bytes\n", argv[1 + i], bytes);
        return 3;
      }
      fclose(f);
    }
    tensors[i] = dl_tensor(info, data);
  }
  /* The arena: KILN_<M>_ARENA_BYTES, aligned as the model asks. */
  raw_arena = malloc((size_t)m->arena_bytes + (size_t)m->arena_align);
  if (raw_arena == NULL) return 3;
  arena = raw_arena + (m->arena_align - (uintptr_t)raw_arena % m->arena_align) % m->arena_align;
  status = KILN_FN(KILN_MODEL, call)(tensors, m->num_inputs, tensors + m->num_inputs, m->num_outputs, arena);
  if (status != KILN_OK) {
    fprintf(stderr, "kiln_%s_call failed (%d): %s\n", m->name, status, KILN_FN(KILN_MODEL, error_string)(status));
    return 1;
  }
  for (i = 0; i < m->num_outputs; i++) {
    const char* path = argv[1 + m->num_inputs + i];
    size_t bytes = tensor_bytes(&m->outputs[i]);
    FILE* f = fopen(path, "wb");
    if (f == NULL || fwrite(tensors[m->num_inputs + i].data, 1, bytes, f) != bytes || fclose(f) != 0) {
      fprintf(stderr, "%s: cannot write\n", path);
      return 3;
    }
  }
  for (i = 0; i < m->num_inputs + m->num_outputs; i++) free(tensors[i].data);
  free(raw_arena);
  return 0;
}
