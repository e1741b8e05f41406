//! The TIR passes, text in, text out: each test parses a kernel written as
//! TIR text, runs one pass and compares the printed result with its
//! snapshot (`UPDATE_EXPECT=1` blesses); input and output are well-formed
//! and the output reads back as itself.

use expect_test::{expect, Expect};
use kiln_ir::tir::transform::{
    flatten_buffers, fuse_sibling_loops, partition_loops, remove_noops, simplify_prim_func, unroll_loops,
    vectorize_loops,
};
use kiln_ir::tir::{parse_prim_func, print_prim_func, verify_prim_func, PrimFunc};

/// `text` without its first line break and its common indentation.
fn dedent(text: &str) -> String {
    let text = text.strip_prefix('\n').unwrap_or(text);
    let indent = text.lines().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min();
    text.lines().map(|l| format!("{}\n", l.get(indent.unwrap_or(0)..).unwrap_or(""))).collect()
}

/// Parse `input`, run `pass`, compare the printed result with `expected`.
fn check_pass(pass: fn(PrimFunc) -> PrimFunc, input: &str, expected: Expect) {
    let f = parse_prim_func(&dedent(input)).unwrap_or_else(|e| panic!("{e}"));
    verify_prim_func(&f).expect("the input is well-formed");
    let g = pass(f);
    verify_prim_func(&g).expect("the output is well-formed");
    let text = print_prim_func(&g);
    let again = parse_prim_func(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_prim_func(&again), text, "the output does not read back as itself");
    expected.assert_eq(&text);
}

#[test]
fn simplify_folds_index_arithmetic_and_decided_conditions() {
    check_pass(
        simplify_prim_func,
        r#"
        def k(a: T.Buffer([4, 8], "float32"), b: T.Buffer([32], "float32")):
            for io in T.serial(4):
                for ii in T.serial(8):
                    if (io * 8 + ii) // 8 < 4:
                        b[(io * 8 + ii) - io * 8 + io * 8] = a[(io * 8 + ii) // 8, (io * 8 + ii) % 8] * T.float32(1.0)
                    else:
                        b[0] = T.float32(0.0)
            for once in T.serial(1):
                b[once + 3] = T.float32(2.0)
        "#,
        expect![[r#"
            @T.prim_func
            def k(a: T.Buffer([4, 8], "float32"), b: T.Buffer([32], "float32")):
                for io in T.serial(4):
                    for ii in T.serial(8):
                        b[(ii + (io * 8))] = (a[io, ii] * T.float32(1.0))
                b[3] = T.float32(2.0)
        "#]],
    );
}

#[test]
fn unroll_repeats_the_body_per_value() {
    check_pass(
        unroll_loops,
        r#"
        def k(a: T.Buffer([8], "float32"), b: T.Buffer([8], "float32")):
            for i in T.serial(2):
                for u in T.unroll(1, 1 + 3):
                    b[i * 4 + u] = a[i * 4 + u] + T.float32(1.0)
        "#,
        expect![[r#"
            @T.prim_func
            def k(a: T.Buffer([8], "float32"), b: T.Buffer([8], "float32")):
                for i in T.serial(2):
                    b[((i * 4) + 1)] = (a[((i * 4) + 1)] + T.float32(1.0))
                    b[((i * 4) + 2)] = (a[((i * 4) + 2)] + T.float32(1.0))
                    b[((i * 4) + 3)] = (a[((i * 4) + 3)] + T.float32(1.0))
        "#]],
    );
}

#[test]
fn vectorize_turns_the_loop_into_ramps_and_broadcasts() {
    check_pass(
        vectorize_loops,
        r#"
        def k(a: T.Buffer([32], "float32"), s: T.Buffer([4], "float32"), b: T.Buffer([32], "float32")):
            for i in T.parallel(4):
                for v in T.vectorized(8):
                    b[i * 8 + v] = T.exp(a[i * 8 + v]) * s[i] + T.float32(1.0)
                for w in T.vectorized(8):
                    b[0] = b[0] + a[i * 8 + w]
        "#,
        expect![[r#"
            @T.prim_func
            def k(a: T.Buffer([32], "float32"), s: T.Buffer([4], "float32"), b: T.Buffer([32], "float32")):
                for i in T.parallel(4):
                    b[T.Ramp((i * 8), 1, 8)] = ((T.exp(a[T.Ramp((i * 8), 1, 8)]) * T.Broadcast(s[i], 8)) + T.Broadcast(T.float32(1.0), 8))
                    for w in T.serial(8):
                        b[0] = (b[0] + a[((i * 8) + w)])
        "#]],
    );
}

/// A load whose last index is a vector is a vector, whatever the index
/// before it (it used to take its lanes from the first index only, and a
/// multi-dimensional load was then broadcast as if it were one value).
#[test]
fn vectorize_reads_a_row_of_a_multi_dimensional_buffer_as_a_vector() {
    check_pass(
        vectorize_loops,
        r#"
        def k(a: T.Buffer([4, 8], "float32"), b: T.Buffer([4, 8], "float32")):
            for i in T.serial(4):
                for v in T.vectorized(8):
                    b[i, v] = a[i, v] * T.float32(2.0)
        "#,
        expect![[r#"
            @T.prim_func
            def k(a: T.Buffer([4, 8], "float32"), b: T.Buffer([4, 8], "float32")):
                for i in T.serial(4):
                    b[i, T.Ramp(0, 1, 8)] = (a[i, T.Ramp(0, 1, 8)] * T.Broadcast(T.float32(2.0), 8))
        "#]],
    );
}

#[test]
fn loop_partition_splits_a_padded_row_at_its_borders() {
    check_pass(
        partition_loops,
        r#"
        def pad(x: T.Buffer([8], "float32"), out: T.Buffer([10], "float32")):
            for w in T.serial(10):
                out[w] = T.Select(w - 1 >= 0 and w - 1 < 8, x[T.min(T.max(w - 1, 0), 7)], T.float32(0.0))
        "#,
        expect![[r#"
            @T.prim_func
            def pad(x: T.Buffer([8], "float32"), out: T.Buffer([10], "float32")):
                out[0] = T.float32(0.0)
                for w in T.vectorized(1, 1 + 8):
                    out[w] = x[(w - 1)]
                out[9] = T.float32(0.0)
        "#]],
    );
}

#[test]
fn flatten_gives_every_access_one_row_major_index() {
    check_pass(
        flatten_buffers,
        r#"
        def k(a: T.Buffer([2, 3, 4], "float32"), s: T.Buffer([], "float32"), b: T.Buffer([2, 12], "float32")):
            for i in T.serial(2):
                for j in T.serial(3):
                    for l in T.serial(4):
                        b[i, j * 4 + l] = a[i, j, l] * s[]
        "#,
        expect![[r#"
            @T.prim_func
            def k(a: T.Buffer([2, 3, 4], "float32"), s: T.Buffer([], "float32"), b: T.Buffer([2, 12], "float32")):
                for i in T.serial(2):
                    for j in T.serial(3):
                        for l in T.serial(4):
                            b[((i * 12) + ((j * 4) + l))] = (a[((((i * 3) + j) * 4) + l)] * s[0])
        "#]],
    );
}

#[test]
fn remove_noop_drops_empty_loops_dead_branches_and_unused_buffers() {
    check_pass(
        remove_noops,
        r#"
        def k(a: T.Buffer([4], "float32")):
            t = T.alloc_buffer([4], "float32", scope="local")
            for i in T.serial(4):
                pass
            for i in T.serial(0):
                a[i] = T.float32(1.0)
            if False:
                a[0] = T.float32(2.0)
            else:
                a[1] = T.float32(3.0)
            if (a[2] < T.float32(0.0)):
                pass
            n: T.int32 = T.int32(1)
            pass
        "#,
        expect![[r#"
            @T.prim_func
            def k(a: T.Buffer([4], "float32")):
                a[1] = T.float32(3.0)
        "#]],
    );
}

#[test]
fn fuse_sibling_loops_merges_stages_over_the_same_rows() {
    check_pass(
        fuse_sibling_loops,
        r#"
        def k(a: T.Buffer([4, 8], "float32"), t: T.Buffer([4, 8], "float32"), b: T.Buffer([4, 8], "float32")):
            for i in T.serial(4):
                for j in T.serial(8):
                    t[i, j] = a[i, j] * T.float32(2.0)
            for i2 in T.serial(4):
                for j2 in T.serial(8):
                    b[i2, j2] = T.max(t[i2, j2], T.float32(0.0))
            for r in T.serial(4):
                for c in T.serial(8):
                    b[r, c] = b[r, 7 - c]
        "#,
        expect![[r#"
            @T.prim_func
            def k(a: T.Buffer([4, 8], "float32"), t: T.Buffer([4, 8], "float32"), b: T.Buffer([4, 8], "float32")):
                for i in T.serial(4):
                    for j in T.serial(8):
                        t[i, j] = (a[i, j] * T.float32(2.0))
                        b[i, j] = T.max(t[i, j], T.float32(0.0))
                    for c in T.serial(8):
                        b[i, c] = b[i, (7 - c)]
        "#]],
    );
}

/// TVM's `test_unroll_loop` (tests/python/tir-transform/test_tir_transform_unroll_loop.py):
/// a loop of 2 around an unrolled loop of 8 is 16 steps.
#[test]
fn test_unroll_loop() {
    use kiln_ir::tir::transform::{unroll_loops_with, UnrollConfig};
    use kiln_ir::tir::{ForKind, Stmt};
    let f = kiln_ir::tir::parse_prim_func(
        "@T.prim_func
def main(A: T.Buffer([16], \"float32\")):
    for i in T.serial(2):
        for j in T.unroll(8):
            A[(j + 1)] = (A[i] + T.float32(1.0))
",
    )
    .expect("parse");
    let with = |config: UnrollConfig| unroll_loops_with(f.clone(), config).body;
    let is_loop = |s: &Stmt| matches!(s, Stmt::For(_));
    let auto = |auto_max_step| UnrollConfig { auto_max_step, ..UnrollConfig::default() };
    assert!(!is_loop(&with(auto(16))), "16 steps unroll at auto_max_step 16");
    assert!(is_loop(&with(auto(15))), "but not at 15");
    // explicit_unroll = false: the loops stay, marked unrolled.
    match with(UnrollConfig { explicit_unroll: false, ..auto(16) }) {
        Stmt::For(l) => assert_eq!(l.kind, ForKind::Unrolled),
        s => panic!("not a loop: {s:?}"),
    }
    // TVM's defaults only unroll what the schedule marked.
    match with(UnrollConfig::default()) {
        Stmt::For(l) => assert!(l.kind == ForKind::Serial && !is_loop(&l.body)),
        s => panic!("not a loop: {s:?}"),
    }
}
