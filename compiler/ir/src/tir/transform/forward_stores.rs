//! ForwardStores: a store followed at once by a store to the same place that
//! reads it back — `B[i] = v; B[i] = f(B[i])`, how a fused kernel's write-back
//! copies its accumulator out and then applies the epilogue in place — becomes
//! one store, `B[i] = f(v)`.
//!
//! Why: when `B[i]` is a strided vector (a convolution whose vector lanes are
//! output channels, a whole plane apart in NCHW), the read-back is a gather
//! that LLVM forwards lane by lane, and the epilogue then runs on scalars —
//! three scalar operations per element for a bias and a clip. Forwarded, the
//! epilogue runs on the accumulator's vector and only the final store scatters.
//!
//! The same across buffers when the first is kernel-local: `L[i] = v;
//! B[i] = f(L[i])` (an epilogue that changes the element type — a quantizing
//! `cast` — writes another buffer than the convolution's result) becomes
//! `B[i] = f(v)`; a local buffer then never read loses its stores, and
//! RemoveNoOp its allocation (a whole feature map did not fit a kernel's stack).

use crate::tir::{Expr, PrimFunc, Scope, Stmt};

/// How many times `e` reads `buffer` at exactly `indices`, or `None` when it
/// reads `buffer` anywhere else (which the removed store might have written).
fn reads_of(e: &Expr, buffer: u32, indices: &[Expr]) -> Option<usize> {
    let mut count = Some(0);
    fn walk(e: &Expr, buffer: u32, indices: &[Expr], count: &mut Option<usize>) {
        if let Expr::Load(b, idx) = e {
            if b.id() == buffer {
                *count = if idx[..] == indices[..] { count.map(|n| n + 1) } else { None };
            }
        }
        e.for_each_child(|c| walk(c, buffer, indices, count));
    }
    walk(e, buffer, indices, &mut count);
    count
}

/// Whether copying `e` into each of its readers costs nothing worth sharing:
/// a constant, a variable, or a load at pure index arithmetic (a strided
/// read of a register tile, `acc[T.Ramp(0, 16, 5)]`), which LLVM loads once
/// however often it appears — a SiLU epilogue reads its input twice, and
/// unforwarded it stored a 5-lane vector to the output and read it back
/// (YOLOv8n's small 1 × 1 convolutions).
fn trivial(e: &Expr) -> bool {
    match e {
        Expr::Load(_, idx) => idx.iter().all(pure_index),
        e => matches!(e, Expr::Int(..) | Expr::Float(..) | Expr::Var(_)),
    }
}

/// Index arithmetic only: no load or call anywhere in `e`.
fn pure_index(e: &Expr) -> bool {
    if matches!(e, Expr::Load(..) | Expr::Call(..)) {
        return false;
    }
    let mut pure = true;
    e.for_each_child(|c| pure &= pure_index(c));
    pure
}

/// `e` with every read of `buffer` (all at the same indices) replaced by `value`.
fn replace_reads(e: &Expr, buffer: u32, value: &Expr) -> Expr {
    match e {
        Expr::Load(b, _) if b.id() == buffer => value.clone(),
        e => e.map_children(|c| replace_reads(c, buffer, value)),
    }
}

/// Forward each store into the next statement of the same sequence where
/// that statement stores to the same place.
fn forward_in_seq(stmts: Vec<Stmt>) -> Vec<Stmt> {
    let mut out: Vec<Stmt> = Vec::with_capacity(stmts.len());
    for s in stmts {
        let merged = match (out.last(), &s) {
            (
                Some(Stmt::Store { buffer: b1, indices: i1, value: v1 }),
                Stmt::Store { buffer: b2, indices: i2, value: v2 },
            ) if (b1.id() == b2.id() || b1.0.scope == Scope::Local)
                && (b1.id() != b2.id() || i1 == i2)
                && !i2.iter().any(|i| reads_of(i, b1.id(), i1) != Some(0)) =>
            {
                // A value read more than once is copied only when cheap
                // (the codegen does not share repeated subexpressions).
                match reads_of(v2, b1.id(), i1) {
                    // Into the same buffer the first store is overwritten.
                    Some(n) if b1.id() == b2.id() && (n <= 1 || trivial(v1)) => Some(vec![Stmt::Store {
                        buffer: b2.clone(),
                        indices: i2.clone(),
                        value: replace_reads(v2, b1.id(), v1),
                    }]),
                    // Into another one the local store stays (other statements
                    // may read it); it goes if nothing does (dead_local_stores).
                    // Not a value that reads its own buffer (`L[0] = L[0] + L[1];
                    // B = L[0]`): copied after the kept store, it would read the
                    // stored result instead of the old elements.
                    Some(n) if n >= 1 && (n == 1 || trivial(v1)) && reads_of(v1, b1.id(), &[]) == Some(0) => {
                        Some(vec![
                            out.last().cloned().expect("matched a last statement"),
                            Stmt::Store {
                                buffer: b2.clone(),
                                indices: i2.clone(),
                                value: replace_reads(v2, b1.id(), v1),
                            },
                        ])
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        match merged {
            Some(m) => {
                out.pop();
                out.extend(m);
            }
            None => out.push(s),
        }
    }
    out
}

/// The ids of the buffers `s` loads from.
fn loaded_buffers(s: &Stmt) -> std::collections::HashSet<u32> {
    let mut read = std::collections::HashSet::new();
    fn walk(e: &Expr, read: &mut std::collections::HashSet<u32>) {
        if let Expr::Load(b, _) = e {
            read.insert(b.id());
        }
        e.for_each_child(|c| walk(c, read));
    }
    s.visit(&mut |s| match s {
        Stmt::Store { indices, value, .. } => {
            indices.iter().for_each(|i| walk(i, &mut read));
            walk(value, &mut read);
        }
        Stmt::If { cond: e, .. } | Stmt::Let { value: e, .. } | Stmt::Evaluate(e) => walk(e, &mut read),
        Stmt::For(l) => {
            walk(&l.min, &mut read);
            walk(&l.extent, &mut read);
        }
        _ => {}
    });
    read
}

/// Drop the stores to kernel-local buffers that nothing reads.
fn dead_local_stores(body: Stmt) -> Stmt {
    let read = loaded_buffers(&body);
    body.map_post(&mut |s| match s {
        Stmt::Store { buffer, .. } if buffer.0.scope == Scope::Local && !read.contains(&buffer.id()) => Stmt::nop(),
        s => s,
    })
}

/// Forward stores through the read-backs that follow them, everywhere in `f`.
pub fn forward_stores(mut f: PrimFunc) -> PrimFunc {
    let body = std::mem::replace(&mut f.body, Stmt::nop());
    let forwarded = body.map_post(&mut |s| match s {
        Stmt::Seq(v) => Stmt::seq(forward_in_seq(v)),
        s => s,
    });
    f.body = dead_local_stores(forwarded);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tir::parser::parse_prim_func;
    use crate::tir::printer::print_prim_func;

    fn forward(src: &str) -> String {
        print_prim_func(&forward_stores(parse_prim_func(src).expect("parses")))
    }

    #[test]
    fn epilogue_reads_the_forwarded_value() {
        let out = forward(
            "def k(a: T.Buffer([4], \"float32\"), b: T.Buffer([4], \"float32\")):\n\
             \x20   for i in T.serial(4):\n\
             \x20       b[i] = a[i]\n\
             \x20       b[i] = T.max(b[i] + T.float32(1.0), T.float32(0.0))\n",
        );
        assert!(out.contains("b[i] = T.max((a[i] + T.float32(1.0)), T.float32(0.0))"), "{out}");
        assert_eq!(out.matches("b[i] =").count(), 1, "{out}");
    }

    #[test]
    fn other_places_of_the_buffer_block_forwarding() {
        let src = "def k(a: T.Buffer([4], \"float32\"), b: T.Buffer([4], \"float32\")):\n\
             \x20   for i in T.serial(3):\n\
             \x20       b[i] = a[i]\n\
             \x20       b[i] = b[i] + b[(i + 1)]\n";
        let out = forward(src);
        assert_eq!(out.matches("b[i] =").count(), 2, "{out}");
    }

    #[test]
    fn a_local_result_read_by_a_type_changing_epilogue_is_forwarded_and_goes() {
        let out = forward(
            "def k(a: T.Buffer([4], \"float32\"), b: T.Buffer([4], \"uint8\")):\n\
             \x20   c = T.alloc_buffer([4], \"float32\", scope=\"local\")\n\
             \x20   for i in T.serial(4):\n\
             \x20       c[i] = a[i] * T.float32(2.0)\n\
             \x20       b[i] = T.Cast(\"uint8\", T.round(c[i]))\n",
        );
        assert!(out.contains("b[i] = T.Cast(\"uint8\", T.round((a[i] * T.float32(2.0))))"), "{out}");
        assert!(!out.contains("c[i] ="), "{out}");
    }

    #[test]
    fn a_local_buffer_read_elsewhere_keeps_its_stores() {
        let out = forward(
            "def k(a: T.Buffer([4], \"float32\"), b: T.Buffer([4], \"float32\"), d: T.Buffer([4], \"float32\")):\n\
             \x20   c = T.alloc_buffer([4], \"float32\", scope=\"local\")\n\
             \x20   for i in T.serial(4):\n\
             \x20       c[i] = a[i] * T.float32(2.0)\n\
             \x20       b[i] = c[i] + T.float32(1.0)\n\
             \x20   for i in T.serial(4):\n\
             \x20       d[i] = c[i]\n",
        );
        assert!(out.contains("c[i] = (a[i] * T.float32(2.0))"), "{out}");
        assert!(out.contains("d[i] = c[i]"), "{out}");
    }

    /// A register tile's strided read (a column of a channel-vectorized
    /// tile) is forwarded into an epilogue that reads it twice, as SiLU's
    /// `x · sigmoid(x)` does: no 5-lane store to the output read back.
    #[test]
    fn a_strided_tile_read_is_forwarded_into_an_epilogue_reading_it_twice() {
        let out = forward(
            "def k(a: T.Buffer([32], \"float32\"), b: T.Buffer([5], \"float32\")):\n\
             \x20   acc = T.alloc_buffer([32], \"float32\", scope=\"local\")\n\
             \x20   acc[T.Ramp(0, 1, 32)] = a[T.Ramp(0, 1, 32)]\n\
             \x20   b[T.Ramp(0, 1, 5)] = acc[T.Ramp(0, 4, 5)]\n\
             \x20   b[T.Ramp(0, 1, 5)] = b[T.Ramp(0, 1, 5)] * T.exp(b[T.Ramp(0, 1, 5)])\n",
        );
        assert_eq!(out.matches("b[T.Ramp(0, 1, 5)] =").count(), 1, "{out}");
        assert_eq!(out.matches("acc[T.Ramp(0, 4, 5)]").count(), 2, "{out}");
    }

    /// A kept local store whose value reads its own buffer (the last step of
    /// a tree fold, `p[0] = p[0] + p[1]`) is not copied into the next store:
    /// there it would read the new `p[0]` and count `p[1]` twice.
    #[test]
    fn a_local_value_reading_its_own_buffer_is_not_copied_past_its_store() {
        let out = forward(
            "def k(a: T.Buffer([2], \"float32\"), b: T.Buffer([1], \"float32\")):\n\
             \x20   p = T.alloc_buffer([2], \"float32\", scope=\"local\")\n\
             \x20   p[T.Ramp(0, 1, 2)] = a[T.Ramp(0, 1, 2)]\n\
             \x20   p[0] = p[0] + p[1]\n\
             \x20   b[0] = b[0] + p[0]\n",
        );
        assert!(out.contains("b[0] = (b[0] + p[0])"), "{out}");
    }

    #[test]
    fn expensive_values_read_twice_stay_stored() {
        let src = "def k(a: T.Buffer([4], \"float32\"), b: T.Buffer([4], \"float32\")):\n\
             \x20   for i in T.serial(4):\n\
             \x20       b[i] = a[i] * a[i] + T.float32(2.0)\n\
             \x20       b[i] = b[i] * b[i]\n";
        let out = forward(src);
        assert_eq!(out.matches("b[i] =").count(), 2, "{out}");
    }
}
