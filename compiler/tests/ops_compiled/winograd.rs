//! Winograd convolutions, their weights' prefetched stream and their
//! epilogues — each equal to the interpreter.

use super::check_compiled;
use kiln::tir::{Expr, ForKind, Intrinsic, PrimFunc, Stmt};

/// 3 × 3 stride-1 convolutions with constant weights and 64 (≥ 32) channels each
/// way become Winograd convolutions on 8- and 16-lane targets (AlterOpLayout's
/// cost rule; the tile count padded to 16 on both): F(4 × 4) on a 14 × 14 map (16 tiles), F(2 × 2) on a 7 × 7 one
/// (16 tiles, cutting the last tile), with bias, ReLU and a residual add
/// fused after the tiles are written back; the unpadded 5 × 5 map keeps the
/// direct convolution;
/// two 8 × 8 images of 32 channels with an asymmetric padding take F(2 × 2)
/// over 32 tiles of both images; a 24 × 24 map takes F(4 × 4) over 36 tiles
/// (48: three vectors of 16). The products read their weights packed in
/// panels of the register tile's rows (`nn.contrib_batch_matmul_pack`), and
/// prefetch that stream 2 KiB ahead. Output rows of whole tiles (the 24 × 24
/// map, with a residual add) are written back as one vector per column of
/// the tiles, stored `m` apart (interleaved into the row by the LLVM
/// backend); on 16 lanes also the whole tiles of the 14 × 14 and 7 × 7
/// maps, whose last tile is cut (its columns one by one after them); on 8
/// lanes those maps element by element. All equal the interpreter on LLVM
/// and C.
pub(super) fn winograd_convolutions_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 64, 14, 14), float32], %y: Tensor[(1, 64, 7, 7), float32], %z: Tensor[(2, 32, 8, 8), float32],
          %v: Tensor[(1, 64, 24, 24), float32],
          %w1: Tensor[(64, 64, 3, 3), float32], %b1: Tensor[(64), float32], %w2: Tensor[(64, 64, 3, 3), float32],
          %w3: Tensor[(64, 64, 3, 3), float32], %w4: Tensor[(32, 32, 3, 3), float32], %w5: Tensor[(64, 64, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w1, padding=[1, 1, 1, 1]);
  %1 = nn.relu(nn.bias_add(%0, %b1));
  %2 = nn.conv2d(%y, %w2, padding=[1, 1, 1, 1]);
  %3 = nn.relu(add(%2, %y));
  %4 = nn.relu(add(nn.conv2d(%v, %w5, padding=[1, 1, 1, 1]), %v));
  (%1, %3, nn.conv2d(%y, %w3), nn.conv2d(%z, %w4, padding=[0, 1, 1, 0]), %4)
}
"#;
    check_compiled(text, &["w1", "b1", "w2", "w3", "w4", "w5"], false, &|kernels, lanes| {
        let mut tiles: Vec<&str> =
            kernels.iter().filter_map(|k| k.attrs.get("winograd.tile").map(String::as_str)).collect();
        tiles.sort_unstable();
        // An input and an output transform per Winograd convolution.
        let want: &[&str] = if lanes >= 8 { &["2", "2", "2", "2", "4", "4", "4", "4"] } else { &[] };
        assert_eq!(tiles, want, "Winograd transforms with {lanes} lanes");
        // Every product reads its weights packed in panels of its tile rows:
        // 6 on AVX2 (64 rows: ten panels and a zero-padded one), 8 (64
        // channels), 4 (32 channels, 32-column tiles) and 2 (48 columns:
        // three vectors, all of them in the tile) on AVX-512.
        let mut rows: Vec<&str> =
            kernels.iter().filter_map(|k| k.attrs.get("batch_matmul_pack.rows").map(String::as_str)).collect();
        rows.sort_unstable();
        let want: &[&str] = if lanes == 8 { &["6", "6", "6", "6"] } else { &["2", "4", "8", "8"] };
        assert_eq!(rows, want, "packed Winograd weights with {lanes} lanes");
        // Whole-tile rows: one store per column of the tiles, `m` apart.
        if lanes >= 8 {
            let mut interleaved: Vec<(Vec<usize>, Vec<i64>)> = kernels
                .iter()
                .filter(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.contrib_winograd_tiles_to_nchw"))
                .map(|k| (k.params.last().expect("an output").shape().to_vec(), store_strides(k)))
                .filter(|(_, strides)| !strides.is_empty())
                .collect();
            interleaved.sort();
            let want = if lanes >= 16 {
                vec![
                    (vec![1, 64, 7, 7], vec![2, 2]),
                    (vec![1, 64, 14, 14], vec![4, 4, 4, 4]),
                    (vec![1, 64, 24, 24], vec![4, 4, 4, 4]),
                    (vec![2, 32, 7, 7], vec![2, 2]),
                ]
            } else {
                vec![(vec![1, 64, 24, 24], vec![4, 4, 4, 4])]
            };
            assert_eq!(interleaved, want, "{lanes} lanes");
        }
        // ...and asks for them ahead of its reduction (`kiln.prefetch`).
        for k in kernels.iter().filter(|k| k.attrs.contains_key("batch_matmul_pack.rows")) {
            let mut prefetches = 0;
            k.body.visit(&mut |s| {
                if let Stmt::Evaluate(Expr::Call(Intrinsic::Prefetch, ..)) = s {
                    prefetches += 1;
                }
            });
            // One per reduction loop: a tail tile of rows has its own.
            assert!(prefetches >= 1, "{} prefetches its packed weights", k.name);
        }
    });
}

/// The strides of `k`'s strided vector stores (`Ramp(_, s, _)`, `s > 1`).
fn store_strides(k: &PrimFunc) -> Vec<i64> {
    let mut strides = Vec::new();
    k.body.visit(&mut |s| {
        if let Stmt::Store { indices, .. } = s {
            for i in indices {
                if let Expr::Ramp { stride, .. } = i {
                    strides.extend(stride.as_int().filter(|&s| s > 1));
                }
            }
        }
    });
    strides
}

/// Whether `k` stores whole vectors (a loop the schedule vectorized).
fn stores_vectors(k: &PrimFunc) -> bool {
    let mut found = false;
    k.body.visit(&mut |s| {
        if let Stmt::Store { indices, .. } = s {
            found |= indices.iter().any(|i| matches!(i, Expr::Ramp { .. }));
        }
        if let Stmt::For(l) = s {
            found |= l.kind == ForKind::Vectorized;
        }
    });
    found
}

/// A SiLU (`x · sigmoid(x)`) after a Winograd convolution on a 40 × 40 map
/// is computed in vectors: on 16 lanes one per column of the 10 tiles of a
/// row, on 8 lanes 8-lane vectors along the rows (10 tiles would take 8 + 2) — also with a
/// residual added after the SiLU (on 16 lanes the LLVM backend computes
/// both on the row's interleaved run, `codegen/llvm/interleave.rs`). So is a SiLU on 10 × 10
/// planes: its rows, shorter than a 16-lane vector, fused into one run of
/// the plane's 100 elements (vectors and a serial tail on either unit). All
/// equal the interpreter on LLVM and C, 1 and 2 threads.
pub(super) fn sigmoid_rows_off_the_vector_width_vectorize_and_match_the_interpreter() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(1, 32, 40, 40), float32], %y: Tensor[(2, 3, 10, 10), float32],
          %z: Tensor[(1, 32, 40, 40), float32],
          %w: Tensor[(32, 32, 3, 3), float32], %b: Tensor[(32), float32], %w2: Tensor[(32, 32, 3, 3), float32]) {
  %0 = nn.bias_add(nn.conv2d(%x, %w, padding=[1, 1, 1, 1]), %b);
  %1 = nn.conv2d(%z, %w2, padding=[1, 1, 1, 1]);
  (multiply(%0, sigmoid(%0)), multiply(%y, sigmoid(%y)), add(multiply(%1, sigmoid(%1)), %z))
}
"#;
    check_compiled(text, &["w", "b", "w2"], true, &|kernels, lanes| {
        let epilogues: Vec<&PrimFunc> = kernels
            .iter()
            .filter(|k| k.attrs.get("anchor").is_some_and(|a| a == "nn.contrib_winograd_tiles_to_nchw"))
            .collect();
        assert_eq!(epilogues.len(), 2, "two Winograd outputs with {lanes} lanes");
        for epilogue in epilogues {
            assert!(stores_vectors(epilogue), "{} stores vectors with {lanes} lanes", epilogue.name);
            let interleaved = !store_strides(epilogue).is_empty();
            assert_eq!(interleaved, lanes == 16, "{} per column of the tiles with {lanes} lanes", epilogue.name);
        }
        let small = kernels.iter().find(|k| k.params[0].shape() == [2, 3, 10, 10]).expect("the 10-wide SiLU");
        assert!(stores_vectors(small), "{} on 10 × 10 planes with {lanes} lanes", small.name);
    });
}
