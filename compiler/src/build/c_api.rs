//! The C API of a compiled model: `<model>.h` and `<model>_api.c`.
//!
//! The source is portable C99 compiled into `libkiln_<model>.a` next to the
//! kernels, so a C (or any FFI) caller runs the model with nothing of Rust:
//! - `kiln_<m>_run(in0, …, out0, …, arena)`: typed pointers, fixed shapes,
//!   the kernels called in the planned order on the calling thread;
//! - `kiln_<m>_call(inputs, n_in, outputs, n_out, arena)`: the packed entry
//!   over DLPack's `DLTensor` (the `dlpack.h` v0.8+ ABI), which checks count,
//!   null pointers, device, dtype, shape, strides (compact only) and
//!   alignment before running, and answers with a `KILN_ERR_*` code;
//! - `kiln_<m>_error_string(code)` and `kiln_<m>_describe()` (names, shapes,
//!   dtypes, arena size), so a foreign caller can discover the model.
//!
//! Multi-threading stays in the Rust runtime: the C entries pass every
//! kernel one task (`task_id` 0 of 1).

use std::fmt::Write;

use kiln_ir::DataType;

use super::glue::{constant_symbol, sanitize};
use crate::backend::aot::{ExecutorPlan, Storage};
use crate::target::TargetDescription;

/// The byte alignment the arena must have (the memory plan's offsets are multiples of it).
const ARENA_ALIGN: usize = 64;

/// The status codes, shared by every model (`KILN_ERR_…`, value, meaning).
/// Code 1 is also what a kernel returns when an index read from the inputs is out of range.
pub const STATUS_CODES: &[(&str, i32, &str)] = &[
    ("KILN_OK", 0, "success"),
    (
        "KILN_ERR_INDEX_OUT_OF_RANGE",
        1,
        "an index read from the inputs is out of range for the axis it indexes; the outputs are not valid",
    ),
    ("KILN_ERR_NULL_POINTER", 2, "a null pointer where a tensor, its shape, or the arena was expected"),
    ("KILN_ERR_TENSOR_COUNT", 3, "the number of input or output tensors is not the model's"),
    ("KILN_ERR_DEVICE", 4, "a tensor is not in CPU memory (DLPack device type kDLCPU)"),
    ("KILN_ERR_DTYPE", 5, "a tensor's dtype (code, bits, lanes) is not the model's"),
    ("KILN_ERR_SHAPE", 6, "a tensor's rank or shape is not the model's"),
    ("KILN_ERR_STRIDES", 7, "a tensor is not compact row-major (strides must be NULL or those of a dense array)"),
    (
        "KILN_ERR_MISALIGNED",
        8,
        "the arena is not 64-byte aligned, or a tensor's data is not aligned to its element size",
    ),
    ("KILN_ERR_KERNEL", 9, "a kernel failed with an unknown status"),
];

/// The C element type and DLPack (code, bits) of a dtype.
fn c_type(t: DataType) -> (&'static str, u8, u8) {
    const INT: u8 = 0;
    const UINT: u8 = 1;
    const FLOAT: u8 = 2;
    const BOOL: u8 = 6;
    match t {
        DataType::F32 => ("float", FLOAT, 32),
        DataType::F64 => ("double", FLOAT, 64),
        // Half floats travel as their bits.
        DataType::F16 => ("uint16_t", FLOAT, 16),
        DataType::I64 => ("int64_t", INT, 64),
        DataType::I32 => ("int32_t", INT, 32),
        DataType::I16 => ("int16_t", INT, 16),
        DataType::I8 => ("int8_t", INT, 8),
        DataType::U64 => ("uint64_t", UINT, 64),
        DataType::U32 => ("uint32_t", UINT, 32),
        DataType::U16 => ("uint16_t", UINT, 16),
        DataType::U8 => ("uint8_t", UINT, 8),
        DataType::Bool => ("uint8_t", BOOL, 8),
    }
}

/// A C string literal of `s` (escaped; non-ASCII as octal escapes of its UTF-8 bytes).
fn c_string(s: &str) -> String {
    let mut o = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' | b'\\' => {
                o.push('\\');
                o.push(b as char);
            }
            0x20..=0x7e => o.push(b as char),
            _ => {
                let _ = write!(o, "\\{b:03o}");
            }
        }
    }
    o.push('"');
    o
}

/// One input or output of the model as the C API sees it.
struct Port<'a> {
    /// `in0`, `out1`, …: the typed entry's parameter.
    param: String,
    /// `IN0`, `OUT1`: its macros' infix.
    macro_name: String,
    name: &'a str,
    shape: &'a [usize],
    dtype: DataType,
    output: bool,
}

fn ports(plan: &ExecutorPlan) -> Vec<Port<'_>> {
    let ins = plan.inputs.iter().enumerate().map(|(i, &t)| (format!("in{i}"), false, t));
    let outs = plan.outputs.iter().enumerate().map(|(i, &t)| (format!("out{i}"), true, t));
    ins.chain(outs)
        .map(|(param, output, t)| {
            let slot = &plan.tensors[t];
            Port {
                macro_name: param.to_uppercase(),
                param,
                name: &slot.name,
                shape: &slot.shape,
                dtype: slot.dtype,
                output,
            }
        })
        .collect()
}

/// The typed entry's parameter list.
fn run_params(ports: &[Port]) -> String {
    let mut params: Vec<String> = ports
        .iter()
        .map(|p| {
            let constness = if p.output { "" } else { "const " };
            format!("{constness}{}* {}", c_type(p.dtype).0, p.param)
        })
        .collect();
    params.push("void* arena".into());
    params.join(", ")
}

/// `<model>.h`: the run and packed entries, the model's constants, and the
/// kernels and weight symbols (for callers that sequence kernels themselves).
pub fn c_header(model: &str, plan: &ExecutorPlan) -> String {
    let upper = sanitize(model, "model").to_uppercase();
    let guard = format!("KILN_{upper}_H");
    let ports = ports(plan);
    let mut o = String::new();
    let _ = writeln!(o, "/* @generated by kiln {} — do not edit. */", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(
        o,
        "#ifndef {guard}\n#define {guard}\n#include <stdint.h>\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n"
    );
    o.push_str(&common_block());
    let _ = writeln!(o, "\n/* Model `{model}`. */");
    let _ = writeln!(
        o,
        "/* Bytes of scratch memory one run needs; the arena must be KILN_{upper}_ARENA_ALIGN-byte aligned. */"
    );
    let _ = writeln!(o, "#define KILN_{upper}_ARENA_BYTES {}u", plan.arena_bytes);
    let _ = writeln!(o, "#define KILN_{upper}_ARENA_ALIGN {ARENA_ALIGN}u");
    let _ = writeln!(o, "#define KILN_{upper}_NUM_INPUTS {}", plan.inputs.len());
    let _ = writeln!(o, "#define KILN_{upper}_NUM_OUTPUTS {}", plan.outputs.len());
    for p in &ports {
        let (ctype, code, bits) = c_type(p.dtype);
        let kind = if p.output { "Output" } else { "Input" };
        let _ = writeln!(
            o,
            "/* {kind} `{}`: {} {:?} ({ctype}; DLPack code {code}, {bits} bits). */",
            p.name, p.dtype, p.shape
        );
        let dims: Vec<String> = p.shape.iter().map(|d| d.to_string()).collect();
        let m = &p.macro_name;
        let _ = writeln!(o, "#define KILN_{upper}_{m}_NDIM {}", p.shape.len());
        let _ = writeln!(o, "#define KILN_{upper}_{m}_LEN {}u", p.shape.iter().product::<usize>());
        let _ = writeln!(o, "#define KILN_{upper}_{m}_SHAPE {{{}}}", dims.join(", "));
        let _ = writeln!(o, "#define KILN_{upper}_{m}_DTYPE_CODE {code}");
        let _ = writeln!(o, "#define KILN_{upper}_{m}_DTYPE_BITS {bits}");
    }
    let _ = writeln!(
        o,
        "\n/* Run the model on the calling thread: inputs, then outputs (row-major, compact, each aligned to its\n   \
         element size), then the arena (KILN_{upper}_ARENA_BYTES bytes, KILN_{upper}_ARENA_ALIGN-aligned; not shared\n   \
         between concurrent runs). Outputs must not overlap the inputs or the arena. Returns KILN_OK or a\n   \
         KILN_ERR_* code. Nothing is allocated. */"
    );
    let _ = writeln!(o, "int kiln_{model}_run({});", run_params(&ports));
    let _ = writeln!(
        o,
        "/* The packed entry: every tensor checked (count, null, device, dtype, shape, strides, alignment)\n   \
         before the model runs; the same status codes. */"
    );
    let _ = writeln!(
        o,
        "int kiln_{model}_call(const DLTensor* inputs, int num_inputs, DLTensor* outputs, int num_outputs, void* arena);"
    );
    let _ = writeln!(o, "/* What a status code means (a static string; \"unknown status\" for other codes). */");
    let _ = writeln!(o, "const char* kiln_{model}_error_string(int code);");
    let _ = writeln!(o, "/* The model's inputs, outputs (names, shapes, dtypes) and arena size. */");
    let _ = writeln!(o, "const kiln_model_info* kiln_{model}_describe(void);");
    let _ = writeln!(
        o,
        "\n/* The kernels in call order (what kiln_{model}_run does); args: inputs then outputs. Each returns 0,\n   \
         or 1 when an index read from the inputs was out of range (the outputs are then not valid). */"
    );
    for call in &plan.calls {
        let _ = writeln!(o, "/*   {} */", plan.kernels[call.kernel].name);
    }
    for k in &plan.kernels {
        let _ = writeln!(o, "int32_t {}_packed(void** args, int64_t task_id, int64_t num_tasks);", k.name);
    }
    for (i, c) in plan.constants.iter().enumerate() {
        let _ = writeln!(o, "extern const uint8_t {}[{}];", constant_symbol(model, i), c.bytes().len());
    }
    let _ = writeln!(o, "#ifdef __cplusplus\n}}\n#endif\n#endif");
    o
}

/// The declarations every model's header shares, each guarded so that
/// several models' headers (and DLPack's own `dlpack.h`) can be included together.
const COMMON_TYPES: &str = r#"/* DLPack's tensor description, the dlpack.h (v0.8 and later) ABI. Include <dlpack/dlpack.h>
   before this header to use its definitions instead of these. */
#if !defined(DLPACK_DLPACK_H_) && !defined(KILN_DLPACK_TYPES)
#define KILN_DLPACK_TYPES
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 } DLDeviceType;
typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
typedef enum { kDLInt = 0U, kDLUInt = 1U, kDLFloat = 2U, kDLOpaqueHandle = 3U, kDLBfloat = 4U, kDLComplex = 5U, kDLBool = 6U } DLDataTypeCode;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;
#endif

#ifndef KILN_API_TYPES
#define KILN_API_TYPES
/* One input or output: its name in the model, shape and dtype. */
typedef struct { const char* name; int32_t ndim; const int64_t* shape; DLDataType dtype; } kiln_tensor_info;
/* A model as kiln_<model>_describe() returns it. */
typedef struct {
  const char* name;
  const char* target;
  int32_t num_inputs;
  const kiln_tensor_info* inputs;
  int32_t num_outputs;
  const kiln_tensor_info* outputs;
  uint64_t arena_bytes;
  uint64_t arena_align;
} kiln_model_info;
/* Status codes of kiln_<model>_run and kiln_<model>_call. */
"#;

/// The status-code macros and the end of the shared block.
fn status_macros() -> String {
    let mut o = String::new();
    for (name, value, meaning) in STATUS_CODES {
        let _ = writeln!(o, "#define {name} {value} /* {meaning} */");
    }
    o.push_str("#endif\n");
    o
}

/// `<model>_api.c`: the entries the header declares.
pub fn c_api_source(model: &str, plan: &ExecutorPlan, target: &TargetDescription) -> String {
    let ports = ports(plan);
    let upper = sanitize(model, "model").to_uppercase();
    let mut o = String::new();
    let _ = writeln!(o, "/* @generated by kiln {} — do not edit. */", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(o, "#include <stddef.h>\n#include <stdint.h>\n#include \"{model}.h\"\n");
    // describe()
    for (k, p) in ports.iter().enumerate() {
        if !p.shape.is_empty() {
            let dims: Vec<String> = p.shape.iter().map(|d| d.to_string()).collect();
            let _ = writeln!(o, "static const int64_t shape_{k}[] = {{{}}};", dims.join(", "));
        }
    }
    let info = |p: &Port, k: usize| {
        let (_, code, bits) = c_type(p.dtype);
        let shape = if p.shape.is_empty() { "NULL".to_string() } else { format!("shape_{k}") };
        format!("{{{}, {}, {shape}, {{{code}, {bits}, 1}}}}", c_string(p.name), p.shape.len())
    };
    let n_in = plan.inputs.len();
    let table = |o: &mut String, name: &str, range: std::ops::Range<usize>| -> String {
        if range.is_empty() {
            return "NULL".into();
        }
        let rows: Vec<String> = range.map(|k| info(&ports[k], k)).collect();
        let _ = writeln!(o, "static const kiln_tensor_info {name}[] = {{\n  {}\n}};", rows.join(",\n  "));
        name.into()
    };
    let inputs = table(&mut o, "input_info", 0..n_in);
    let outputs = table(&mut o, "output_info", n_in..ports.len());
    let _ = writeln!(
        o,
        "static const kiln_model_info model_info = {{{}, {}, {n_in}, {inputs}, {}, {outputs}, {}u, {ARENA_ALIGN}u}};",
        c_string(model),
        c_string(&target.target),
        plan.outputs.len(),
        plan.arena_bytes
    );
    let _ = writeln!(o, "const kiln_model_info* kiln_{model}_describe(void) {{ return &model_info; }}\n");
    // error_string()
    let _ = writeln!(o, "const char* kiln_{model}_error_string(int code) {{\n  switch (code) {{");
    for (name, _, meaning) in STATUS_CODES {
        let _ = writeln!(o, "  case {name}: return {};", c_string(meaning));
    }
    let _ = writeln!(o, "  default: return \"unknown status\";\n  }}\n}}\n");
    // run()
    let _ = writeln!(o, "int kiln_{model}_run({}) {{", run_params(&ports));
    let _ = writeln!(o, "  unsigned char* a = (unsigned char*)arena;\n  int32_t s;");
    let nulls: Vec<String> = ports.iter().map(|p| format!("{} == NULL", p.param)).collect();
    if !nulls.is_empty() {
        let _ = writeln!(o, "  if ({}) return KILN_ERR_NULL_POINTER;", nulls.join(" || "));
    }
    let _ = writeln!(o, "  if (a == NULL && KILN_{upper}_ARENA_BYTES > 0u) return KILN_ERR_NULL_POINTER;");
    let _ = writeln!(o, "  if ((uintptr_t)a % KILN_{upper}_ARENA_ALIGN != 0u) return KILN_ERR_MISALIGNED;");
    for call in &plan.calls {
        let k = &plan.kernels[call.kernel];
        let args: Vec<String> = call
            .args
            .iter()
            .map(|&t| match plan.tensors[t].storage {
                Storage::Input(i) => format!("(void*){}", ports[i].param),
                Storage::Output(i) => format!("(void*){}", ports[n_in + i].param),
                Storage::Constant(i) => format!("(void*){}", constant_symbol(model, i)),
                Storage::Arena { offset } => format!("(void*)(a + {offset})"),
            })
            .collect();
        let _ = writeln!(o, "  {{\n    void* args[] = {{{}}};", args.join(", "));
        let _ = writeln!(
            o,
            "    s = {}_packed(args, 0, 1);\n    \
             if (s != 0) return s == KILN_ERR_INDEX_OUT_OF_RANGE ? KILN_ERR_INDEX_OUT_OF_RANGE : KILN_ERR_KERNEL;\n  }}",
            k.name
        );
    }
    let _ = writeln!(o, "  return KILN_OK;\n}}\n");
    // call()
    o.push_str(CHECK_TENSOR);
    let _ = writeln!(
        o,
        "int kiln_{model}_call(const DLTensor* inputs, int num_inputs, DLTensor* outputs, int num_outputs, void* arena) {{"
    );
    let _ = writeln!(o, "  int s, i;");
    let _ = writeln!(
        o,
        "  if (num_inputs != KILN_{upper}_NUM_INPUTS || num_outputs != KILN_{upper}_NUM_OUTPUTS) return KILN_ERR_TENSOR_COUNT;"
    );
    let _ = writeln!(
        o,
        "  if ((inputs == NULL && num_inputs > 0) || (outputs == NULL && num_outputs > 0)) return KILN_ERR_NULL_POINTER;"
    );
    let _ = writeln!(
        o,
        "  for (i = 0; i < num_inputs; i++) if ((s = check_tensor(&inputs[i], &input_info[i])) != KILN_OK) return s;"
    );
    let _ = writeln!(
        o,
        "  for (i = 0; i < num_outputs; i++) if ((s = check_tensor(&outputs[i], &output_info[i])) != KILN_OK) return s;"
    );
    let args: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let (ctype, _, _) = c_type(p.dtype);
            let (constness, array, index) = if p.output { ("", "outputs", k - n_in) } else { ("const ", "inputs", k) };
            format!("({constness}{ctype}*)tensor_data(&{array}[{index}])")
        })
        .chain(std::iter::once("arena".to_string()))
        .collect();
    let _ = writeln!(o, "  return kiln_{model}_run({});\n}}", args.join(", "));
    o
}

/// The packed entry's per-tensor check, `static` in every model's source.
const CHECK_TENSOR: &str = r#"/* The first element of a tensor. */
static void* tensor_data(const DLTensor* t) { return (unsigned char*)t->data + t->byte_offset; }

/* Whether tensor `t` is what `want` describes, as a status code. */
static int check_tensor(const DLTensor* t, const kiln_tensor_info* want) {
  int32_t d;
  int64_t expected = 1;
  if (t->data == NULL) return KILN_ERR_NULL_POINTER;
  if (t->device.device_type != kDLCPU) return KILN_ERR_DEVICE;
  if (t->dtype.code != want->dtype.code || t->dtype.bits != want->dtype.bits || t->dtype.lanes != want->dtype.lanes)
    return KILN_ERR_DTYPE;
  if (t->ndim != want->ndim) return KILN_ERR_SHAPE;
  if (t->ndim > 0 && t->shape == NULL) return KILN_ERR_NULL_POINTER;
  for (d = 0; d < t->ndim; d++)
    if (t->shape[d] != want->shape[d]) return KILN_ERR_SHAPE;
  /* Compact row-major; the stride of an axis of extent 1 does not matter (DLPack allows any). */
  if (t->strides != NULL)
    for (d = t->ndim - 1; d >= 0; d--) {
      if (t->shape[d] != 1 && t->strides[d] != expected) return KILN_ERR_STRIDES;
      expected *= t->shape[d];
    }
  if ((uintptr_t)tensor_data(t) % (uintptr_t)(want->dtype.bits / 8u) != 0u) return KILN_ERR_MISALIGNED;
  return KILN_OK;
}

"#;

/// The full shared block: types, then the status macros.
fn common_block() -> String {
    format!("{COMMON_TYPES}{}", status_macros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_strings_are_escaped() {
        assert_eq!(c_string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(c_string("input.1"), "\"input.1\"");
        assert_eq!(c_string("é\n"), "\"\\303\\251\\012\"");
    }

    #[test]
    fn status_codes_are_distinct_and_start_at_zero() {
        for (i, (_, value, _)) in STATUS_CODES.iter().enumerate() {
            assert_eq!(*value, i as i32);
        }
        // The kernels' own status for an index out of range passes through unchanged.
        assert_eq!(STATUS_CODES[1].1, kiln_runtime::STATUS_INDEX_OUT_OF_RANGE);
    }
}
