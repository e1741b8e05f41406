//! The `nn.*` operators: type relations (including their errors) and the
//! reference implementations against hand-computed values.

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{op_registry, Type, Value};
use kiln_ir::{DataType, Tensor};

fn attrs(op: &str, given: &[(&str, AttrValue)]) -> Attrs {
    let def = op_registry().by_name(op).expect("registered");
    Attrs::normalize(&Attrs::from_pairs(given.iter().map(|(k, v)| (*k, v.clone()))), &def.attrs, op).expect("attrs")
}

fn rel(op: &str, args: &[Type], given: &[(&str, AttrValue)]) -> Result<Type, String> {
    (op_registry().by_name(op).expect("registered").type_rel)(args, &attrs(op, given)).map_err(String::from)
}

fn eval(op: &str, args: &[Tensor], given: &[(&str, AttrValue)]) -> Value {
    let a = attrs(op, given);
    let vals: Vec<Value> = args.iter().cloned().map(Value::Tensor).collect();
    let out = (op_registry().by_name(op).expect("registered").eval)(&vals, &a).expect("eval");
    // The value must have the type the relation promises.
    let types: Vec<Type> = args.iter().map(|t| Type::tensor(t.shape().to_vec(), t.dtype())).collect();
    let ty = rel(op, &types, given).expect("type");
    fn type_of(v: &Value) -> Type {
        match v {
            Value::Tensor(t) => Type::tensor(t.shape().to_vec(), t.dtype()),
            Value::Tuple(f) => Type::Tuple(f.iter().map(type_of).collect()),
            Value::Closure(_) => Type::Tuple(vec![]),
        }
    }
    assert_eq!(type_of(&out), ty, "{op}: value and type relation disagree");
    out
}

fn vals(v: &Value) -> Vec<f64> {
    match v {
        Value::Tensor(t) => t.to_f64_vec(),
        Value::Tuple(f) => vals(&f[0]),
        Value::Closure(_) => vec![],
    }
}

fn t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_f64(DataType::F32, shape.to_vec(), v)
}

fn ty(shape: &[usize]) -> Type {
    Type::tensor(shape.to_vec(), DataType::F32)
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

fn close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-6, "{a:?} vs {b:?}");
    }
}

#[test]
fn dense_and_matmul() {
    assert_eq!(rel("nn.dense", &[ty(&[2, 3]), ty(&[4, 3])], &[]).unwrap(), ty(&[2, 4]));
    assert!(rel("nn.dense", &[ty(&[2, 3]), ty(&[4, 2])], &[]).unwrap_err().contains("reduction size"));
    assert!(rel("nn.dense", &[ty(&[2, 3]), ty(&[4, 3])], &[("units", AttrValue::Int(5))])
        .unwrap_err()
        .contains("units=5"));
    assert!(rel("nn.dense", &[ty(&[2, 3]), ty(&[4, 3, 1])], &[]).unwrap_err().contains("2-D weight"));
    // [[1, 2], [3, 4]] · [[1, 0], [1, 1], [0, 2]]ᵀ
    let x = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let w = t(&[3, 2], &[1.0, 0.0, 1.0, 1.0, 0.0, 2.0]);
    assert_eq!(vals(&eval("nn.dense", &[x.clone(), w], &[])), vec![1.0, 3.0, 4.0, 3.0, 7.0, 8.0]);
    let b = t(&[2, 3], &[1.0, 1.0, 0.0, 0.0, 1.0, 2.0]);
    assert_eq!(vals(&eval("nn.matmul", &[x.clone(), b], &[])), vec![1.0, 3.0, 4.0, 3.0, 7.0, 8.0]);
    let tr = [("transpose_a", AttrValue::Bool(true))];
    assert_eq!(vals(&eval("nn.matmul", &[x.clone(), x.clone()], &tr)), vec![10.0, 14.0, 14.0, 20.0]);
    assert!(rel("nn.matmul", &[ty(&[2, 3]), ty(&[2, 3])], &[]).unwrap_err().contains("differ"));
}

#[test]
fn dense_pack() {
    let nc2n = [("weight_layout", AttrValue::Str("NC2n".into()))];
    assert_eq!(rel("nn.contrib_dense_pack", &[ty(&[2, 3]), ty(&[2, 3, 2])], &nc2n).unwrap(), ty(&[2, 4]));
    // TVM's default layout `NC`: the panel width is the weight's last axis.
    assert_eq!(rel("nn.contrib_dense_pack", &[ty(&[1, 5, 3]), ty(&[3, 3, 4])], &[]).unwrap(), ty(&[1, 5, 12]));
    let err = |x: &[usize], w: &[usize], a: &[(&str, AttrValue)]| rel("nn.contrib_dense_pack", &[ty(x), ty(w)], a);
    assert!(err(&[2, 3], &[2, 4, 2], &nc2n).unwrap_err().contains("reduction size"));
    assert!(err(&[2, 3], &[2, 3, 4], &nc2n).unwrap_err().contains("[units/2, in, 2]"));
    assert!(err(&[2, 3], &[4, 3], &[]).unwrap_err().contains("[units/b, in, b]"));
    assert!(err(&[2, 3], &[2, 3, 2], &[("units", AttrValue::Int(5))]).unwrap_err().contains("units=5"));
    let bad = [("weight_layout", AttrValue::Str("NK2n".into()))];
    assert!(err(&[2, 3], &[2, 3, 2], &bad).unwrap_err().contains("unsupported weight_layout"));
    // The dense product of [[1, 2], [3, 4]] and [[1, 0], [1, 1], [0, 2], [2, 1]]ᵀ,
    // its weight in panels of 2 columns: [[[1, 1], [0, 1]], [[0, 2], [2, 1]]].
    let x = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let w = t(&[2, 2, 2], &[1.0, 1.0, 0.0, 1.0, 0.0, 2.0, 2.0, 1.0]);
    assert_eq!(
        vals(&eval("nn.contrib_dense_pack", &[x.clone(), w.clone()], &nc2n)),
        vec![1.0, 3.0, 4.0, 4.0, 3.0, 7.0, 8.0, 10.0]
    );
    // `units` short of the last panel (a weight zero-padded to whole panels):
    // only the first `units` columns; at least one column of the last panel.
    let three = [("units", AttrValue::Int(3))];
    assert_eq!(vals(&eval("nn.contrib_dense_pack", &[x, w], &three)), vec![1.0, 3.0, 4.0, 3.0, 7.0, 8.0]);
    assert!(err(&[2, 3], &[2, 3, 2], &[("units", AttrValue::Int(2))]).unwrap_err().contains("units=2"));
}

#[test]
fn batch_matmul_pack() {
    let rel_pack =
        |a: &[usize], b: &[usize], at: &[(&str, AttrValue)]| rel("nn.contrib_batch_matmul_pack", &[ty(a), ty(b)], at);
    // A in panels of 2 rows: [batch 1, 2 panels, in 2, 2] is 4 rows.
    assert_eq!(rel_pack(&[1, 2, 2, 2], &[1, 2, 3], &[]).unwrap(), ty(&[1, 4, 3]));
    let three = [("units", AttrValue::Int(3))];
    assert_eq!(rel_pack(&[1, 2, 2, 2], &[1, 2, 3], &three).unwrap(), ty(&[1, 3, 3]));
    assert!(rel_pack(&[1, 2, 2, 2], &[1, 2, 3], &[("units", AttrValue::Int(2))]).unwrap_err().contains("units=2"));
    assert!(rel_pack(&[1, 2, 2, 2], &[1, 3, 3], &[]).unwrap_err().contains("[batch, units/r, in, r]"));
    assert!(rel_pack(&[1, 2, 2, 2], &[2, 2, 3], &[]).unwrap_err().contains("batch sizes"));
    // A = [[1, 2], [3, 4], [5, 6]] (3 rows, panels of 2: the last padded with
    // a zero row), packed [[[1, 3], [2, 4]], [[5, 0], [6, 0]]]; B = [[1, 0], [1, 1]].
    let a = t(&[1, 2, 2, 2], &[1.0, 3.0, 2.0, 4.0, 5.0, 0.0, 6.0, 0.0]);
    let b = t(&[1, 2, 2], &[1.0, 0.0, 1.0, 1.0]);
    assert_eq!(vals(&eval("nn.contrib_batch_matmul_pack", &[a, b], &three)), vec![3.0, 2.0, 7.0, 4.0, 11.0, 6.0]);
}

#[test]
fn batch_matmul() {
    let tb = [("transpose_b", AttrValue::Bool(true))];
    assert_eq!(rel("nn.batch_matmul", &[ty(&[2, 3, 4]), ty(&[2, 5, 4])], &tb).unwrap(), ty(&[2, 3, 5]));
    assert_eq!(rel("nn.batch_matmul", &[ty(&[1, 3, 4]), ty(&[6, 5, 4])], &tb).unwrap(), ty(&[6, 3, 5]));
    assert!(rel("nn.batch_matmul", &[ty(&[2, 3, 4]), ty(&[3, 5, 4])], &tb).unwrap_err().contains("do not broadcast"));
    assert!(rel("nn.batch_matmul", &[ty(&[3, 4]), ty(&[5, 4])], &[]).unwrap_err().contains("3-D"));
    let a = t(&[1, 1, 2], &[1.0, 2.0]);
    let b = t(&[1, 2, 2], &[3.0, 4.0, 5.0, 6.0]);
    assert_eq!(vals(&eval("nn.batch_matmul", &[a.clone(), b.clone()], &tb)), vec![11.0, 17.0]);
    // TVM's BatchMatmulAttrs default: no transpose (`nn.batch_matmul(%a, %b)`
    // in Relay text is a·b), as test_ir_parser.py's programs read it.
    assert_eq!(rel("nn.batch_matmul", &[ty(&[2, 3, 4]), ty(&[2, 4, 5])], &[]).unwrap(), ty(&[2, 3, 5]));
    assert_eq!(vals(&eval("nn.batch_matmul", &[a, b], &[])), vec![13.0, 16.0]);
}

#[test]
fn bias_add() {
    assert_eq!(rel("nn.bias_add", &[ty(&[1, 3, 2]), ty(&[3])], &[]).unwrap(), ty(&[1, 3, 2]));
    assert!(rel("nn.bias_add", &[ty(&[1, 3, 2]), ty(&[2])], &[]).unwrap_err().contains("does not match axis 1"));
    let x = t(&[1, 2, 2], &[0.0, 0.0, 0.0, 0.0]);
    assert_eq!(vals(&eval("nn.bias_add", &[x.clone(), t(&[2], &[1.0, 2.0])], &[])), vec![1.0, 1.0, 2.0, 2.0]);
    assert_eq!(
        vals(&eval("nn.bias_add", &[x, t(&[2], &[1.0, 2.0])], &[("axis", AttrValue::Int(-1))])),
        vec![1.0, 2.0, 1.0, 2.0]
    );
}

#[test]
fn conv2d() {
    assert_eq!(
        rel("nn.conv2d", &[ty(&[1, 3, 8, 8]), ty(&[4, 3, 3, 3])], &[("padding", ints(&[1]))]).unwrap(),
        ty(&[1, 4, 8, 8])
    );
    assert_eq!(
        rel(
            "nn.conv2d",
            &[ty(&[1, 4, 9, 9]), ty(&[4, 1, 3, 3])],
            &[("groups", AttrValue::Int(4)), ("strides", ints(&[2, 2]))]
        )
        .unwrap(),
        ty(&[1, 4, 4, 4])
    );
    let e = rel("nn.conv2d", &[ty(&[1, 3, 8, 8]), ty(&[4, 2, 3, 3])], &[]).unwrap_err();
    assert_eq!(e, "mismatched channels: data has 3 channels, weight expects 2 × groups 1");
    assert!(rel("nn.conv2d", &[ty(&[3, 8, 8]), ty(&[4, 3, 3, 3])], &[]).unwrap_err().contains("4-D"));
    assert!(rel("nn.conv2d", &[ty(&[1, 3, 8, 8]), ty(&[4, 3, 3, 3])], &[("padding", ints(&[1, 1, 1]))])
        .unwrap_err()
        .contains("1, 2 or 4"));
    assert!(rel("nn.conv2d", &[ty(&[1, 3, 2, 2]), ty(&[4, 3, 3, 3])], &[]).unwrap_err().contains("does not fit"));
    assert!(rel("nn.conv2d", &[ty(&[1, 3, 8, 8]), ty(&[4, 3, 3, 3])], &[("channels", AttrValue::Int(5))])
        .unwrap_err()
        .contains("channels=5"));
    // 1 channel 3x3 input, 2x2 kernel of ones, padding 0: window sums.
    let x = t(&[1, 1, 3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let w = t(&[1, 1, 2, 2], &[1.0, 1.0, 1.0, 1.0]);
    assert_eq!(vals(&eval("nn.conv2d", &[x.clone(), w.clone()], &[])), vec![12.0, 16.0, 24.0, 28.0]);
    // Stride 2 with padding 1: windows centred on the corners.
    let p = [("padding", ints(&[1])), ("strides", ints(&[2]))];
    assert_eq!(vals(&eval("nn.conv2d", &[x.clone(), w.clone()], &p)), vec![1.0, 5.0, 11.0, 28.0]);
    // Depthwise: each channel with its own kernel.
    let x2 = t(&[1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0, 40.0]);
    let w2 = t(&[2, 1, 1, 1], &[2.0, -1.0]);
    assert_eq!(
        vals(&eval("nn.conv2d", &[x2, w2], &[("groups", AttrValue::Int(2))])),
        vec![2.0, 4.0, 6.0, 8.0, -10.0, -20.0, -30.0, -40.0]
    );
    // Dilation 2 on a 3x3 input with a 2x2 kernel reads the corners.
    assert_eq!(vals(&eval("nn.conv2d", &[x, w], &[("dilation", ints(&[2]))])), vec![20.0]);
}

#[test]
fn pooling() {
    let x = t(&[1, 1, 3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    let k2 = ("pool_size", ints(&[2, 2]));
    assert_eq!(vals(&eval("nn.max_pool2d", &[x.clone()], &[k2.clone()])), vec![5.0, 6.0, 8.0, 9.0]);
    assert_eq!(vals(&eval("nn.avg_pool2d", &[x.clone()], &[k2.clone()])), vec![3.0, 4.0, 6.0, 7.0]);
    // ceil_mode keeps the partial window at the edge.
    let ceil = [k2.clone(), ("strides", ints(&[2, 2])), ("ceil_mode", AttrValue::Bool(true))];
    assert_eq!(rel("nn.max_pool2d", &[ty(&[1, 1, 3, 3])], &ceil).unwrap(), ty(&[1, 1, 2, 2]));
    assert_eq!(vals(&eval("nn.max_pool2d", &[x.clone()], &ceil)), vec![5.0, 6.0, 8.0, 9.0]);
    assert_eq!(vals(&eval("nn.avg_pool2d", &[x.clone()], &ceil)), vec![3.0, 4.5, 7.5, 9.0]);
    // Padding counted or not.
    let pad = [("pool_size", ints(&[3, 3])), ("padding", ints(&[1]))];
    assert_eq!(vals(&eval("nn.avg_pool2d", &[x.clone()], &pad))[0], 3.0);
    let with = [pad[0].clone(), pad[1].clone(), ("count_include_pad", AttrValue::Bool(true))];
    assert!((vals(&eval("nn.avg_pool2d", &[x.clone()], &with))[0] - 12.0 / 9.0).abs() < 1e-6);
    assert_eq!(vals(&eval("nn.global_avg_pool2d", &[x], &[])), vec![5.0]);
    assert!(rel("nn.max_pool2d", &[ty(&[1, 3, 3])], &[]).unwrap_err().contains("4-D"));
    assert!(rel("nn.max_pool2d", &[ty(&[1, 1, 3, 3])], &[("pool_size", ints(&[4, 4]))])
        .unwrap_err()
        .contains("does not fit"));
}

#[test]
fn normalization_softmax_dropout() {
    let x = t(&[1, 2, 1, 2], &[1.0, 3.0, 10.0, 20.0]);
    let (g, b, m, v) = (t(&[2], &[1.0, 2.0]), t(&[2], &[0.0, 1.0]), t(&[2], &[2.0, 15.0]), t(&[2], &[4.0, 25.0]));
    let eps = [("epsilon", AttrValue::Float(0.0))];
    let out = eval("nn.batch_norm", &[x, g, b, m, v], &eps);
    close(&vals(&out), &[-0.5, 0.5, -1.0, 3.0]);
    assert!(rel("nn.batch_norm", &[ty(&[1, 2, 2]), ty(&[3]), ty(&[2]), ty(&[2]), ty(&[2])], &[])
        .unwrap_err()
        .contains("gamma must have shape (2,)"));
    let y = t(&[2, 2], &[1.0, 3.0, 2.0, 2.0]);
    let ln = eval("nn.layer_norm", &[y.clone(), t(&[2], &[1.0, 1.0]), t(&[2], &[0.0, 0.0])], &[]);
    let k = 1.0 / (1.0f64 + 1e-5).sqrt();
    close(&vals(&ln), &[-k, k, 0.0, 0.0]);
    let sm = vals(&eval("nn.softmax", &[t(&[3], &[0.0, 1.0, 2.0])], &[]));
    close(&sm, &[0.090_030_573_170_380_46, 0.244_728_471_054_797_64, 0.665_240_955_774_821_9]);
    assert!((sm.iter().sum::<f64>() - 1.0).abs() < 1e-6);
    let sm0 = vals(&eval("nn.softmax", &[y.clone()], &[("axis", AttrValue::Int(0))]));
    close(&sm0, &[0.268_941_421_369_995_1, 0.731_058_578_630_004_9, 0.731_058_578_630_004_9, 0.268_941_421_369_995_1]);
    assert!(rel("nn.softmax", &[Type::tensor([2], DataType::I32)], &[]).unwrap_err().contains("floating-point"));
    assert!(rel("nn.softmax", &[ty(&[2])], &[("axis", AttrValue::Int(1))]).unwrap_err().contains("out of range"));
    assert_eq!(vals(&eval("nn.dropout", &[y.clone()], &[])), vals(&Value::Tensor(y)));
    assert!(rel("nn.dropout", &[ty(&[2])], &[("rate", AttrValue::Float(1.5))]).unwrap_err().contains("rate"));
}

/// An `OIHW<k>o` weight ([O/k, I, KH, KW, k]) computes what its OIHW form does.
#[test]
fn conv2d_with_a_packed_weight() {
    let (o, i, kh, kw, k) = (4usize, 3usize, 2usize, 2usize, 2usize);
    let x = t(&[1, i, 4, 5], &(0..60).map(|v| (v as f64 * 0.37).sin()).collect::<Vec<_>>());
    let oihw: Vec<f64> = (0..o * i * kh * kw).map(|v| (v as f64 * 0.91).cos()).collect();
    let mut packed = vec![0.0; oihw.len()];
    for (idx, &v) in oihw.iter().enumerate() {
        let (oc, rest) = (idx / (i * kh * kw), idx % (i * kh * kw));
        packed[((oc / k) * i * kh * kw + rest) * k + oc % k] = v;
    }
    let plain = eval("nn.conv2d", &[x.clone(), t(&[o, i, kh, kw], &oihw)], &[("padding", ints(&[1, 0, 1, 0]))]);
    let layout = ("kernel_layout", AttrValue::Str("OIHW2o".into()));
    let blocked = eval(
        "nn.conv2d",
        &[x, t(&[o / k, i, kh, kw, k], &packed)],
        &[("padding", ints(&[1, 0, 1, 0])), layout.clone()],
    );
    close(&vals(&blocked), &vals(&plain));
    assert_eq!(
        rel("nn.conv2d", &[ty(&[1, i, 4, 5]), ty(&[o / k, i, kh, kw, k])], &[layout.clone()]).expect("type"),
        ty(&[1, o, 3, 4])
    );
    let e = rel("nn.conv2d", &[ty(&[1, i, 4, 5]), ty(&[o, i, kh, kw])], &[layout.clone()]).unwrap_err();
    assert!(e.contains("OIHW2o weight must be [O/2, I, KH, KW, 2]"), "{e}");
    let e = rel(
        "nn.conv2d",
        &[ty(&[1, i, 4, 5]), ty(&[o, i, kh, kw])],
        &[("kernel_layout", AttrValue::Str("HWIO".into()))],
    )
    .unwrap_err();
    assert!(e.contains("unsupported kernel_layout `HWIO`"), "{e}");
    let e = rel("nn.conv2d", &[ty(&[1, 4, 4, 5]), ty(&[2, 2, kh, kw, 2])], &[layout, ("groups", AttrValue::Int(2))])
        .unwrap_err();
    assert!(e.contains("groups=1"), "{e}");
}

/// Deterministic values in [-1, 1) for a tensor of `shape`.
fn wave(shape: &[usize], seed: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| ((i as f64 * 0.618 + seed) * 7.3).sin()).collect();
    t(shape, &v)
}

/// A convolution through the four Winograd operators (weight, input and
/// output transforms around a batched product, tiles back to NCHW) equals
/// `nn.conv2d`: F(2 × 2) and F(4 × 4), padded and unpadded, an asymmetric
/// padding, two images, maps that cut the last tile, and vector-padding tiles.
#[test]
fn winograd_convolution_equals_conv2d() {
    let cases: [(i64, [i64; 4], [usize; 4], usize); 4] = [
        (2, [1, 1, 1, 1], [1, 3, 7, 7], 0),
        (4, [0, 0, 0, 0], [2, 3, 9, 10], 3),
        (4, [1, 0, 2, 1], [1, 3, 6, 5], 16),
        (2, [0, 1, 0, 1], [1, 2, 4, 3], 1),
    ];
    for (m, pads, xs, extra) in cases {
        let (x, w) = (wave(&xs, 0.3), wave(&[5, xs[1], 3, 3], 1.7));
        let want = vals(&eval("nn.conv2d", &[x.clone(), w.clone()], &[("padding", ints(&pads))]));
        let tile = ("tile_size", AttrValue::Int(m));
        let u = eval("nn.contrib_conv2d_winograd_weight_transform", &[w], std::slice::from_ref(&tile));
        let Value::Tensor(u) = u else { panic!("a tensor") };
        let alpha = (m + 2) as usize;
        assert_eq!(u.shape(), &[alpha, alpha, 5, xs[1]]);
        let u = t(&[alpha * alpha, 5, xs[1]], &u.to_f64_vec());
        let (oh, ow) = (xs[2] + (pads[0] + pads[2]) as usize - 2, xs[3] + (pads[1] + pads[3]) as usize - 2);
        let m_ = m as usize;
        let real = xs[0] * oh.div_ceil(m_) * ow.div_ceil(m_);
        let tiles = ("tiles", AttrValue::Int((real + extra) as i64));
        let v = eval("nn.contrib_winograd_input_transform", &[x], &[tile.clone(), ("padding", ints(&pads)), tiles]);
        let Value::Tensor(v) = v else { panic!("a tensor") };
        assert_eq!(v.shape(), &[alpha * alpha, xs[1], real + extra]);
        // The padding tiles are zero.
        let vv = v.to_f64_vec();
        assert!((0..alpha * alpha * xs[1])
            .all(|r| vv[r * (real + extra) + real..(r + 1) * (real + extra)].iter().all(|&z| z == 0.0)));
        let no = AttrValue::Bool(false);
        let prod = eval("nn.batch_matmul", &[u, v], &[("transpose_a", no.clone()), ("transpose_b", no)]);
        let Value::Tensor(prod) = prod else { panic!("a tensor") };
        let y = eval("nn.contrib_winograd_output_transform", &[prod], std::slice::from_ref(&tile));
        let Value::Tensor(y) = y else { panic!("a tensor") };
        assert_eq!(y.shape(), &[m_ * m_, 5, real + extra]);
        let dims = [("batch", xs[0]), ("height", oh), ("width", ow)].map(|(k, d)| (k, AttrValue::Int(d as i64)));
        let got = eval("nn.contrib_winograd_tiles_to_nchw", &[y], &[&[tile][..], &dims[..]].concat());
        let got = vals(&got);
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-4, "F({m}) pads {pads:?} {xs:?}: {a} vs {b}");
        }
    }
}

/// The Winograd operators' type relations refuse what they cannot compute.
#[test]
fn winograd_operators_refuse_bad_shapes_and_attributes() {
    let tile = |m: i64| ("tile_size", AttrValue::Int(m));
    let err = rel("nn.contrib_conv2d_winograd_weight_transform", &[ty(&[4, 3, 3, 3])], &[tile(3)]).unwrap_err();
    assert!(err.contains("tile_size must be 2 or 4"), "{err}");
    let err = rel("nn.contrib_conv2d_winograd_weight_transform", &[ty(&[4, 3, 5, 5])], &[tile(2)]).unwrap_err();
    assert!(err.contains("3 × 3"), "{err}");
    // 7 × 7 output (no padding on a 9 × 9 input) in 2 × 2 tiles: 16 tiles.
    let err =
        rel("nn.contrib_winograd_input_transform", &[ty(&[1, 3, 9, 9])], &[tile(2), ("tiles", AttrValue::Int(15))])
            .unwrap_err();
    assert!(err.contains("cover the 16 tiles"), "{err}");
    let err = rel("nn.contrib_winograd_input_transform", &[ty(&[1, 3, 2, 2])], &[tile(2)]).unwrap_err();
    assert!(err.contains("does not fit"), "{err}");
    let err = rel("nn.contrib_winograd_output_transform", &[ty(&[36, 8, 16])], &[tile(2)]).unwrap_err();
    assert!(err.contains("[16, K, tiles]"), "{err}");
    let dims = [("batch", 1), ("height", 7), ("width", 7)].map(|(k, d)| (k, AttrValue::Int(d)));
    let err = rel("nn.contrib_winograd_tiles_to_nchw", &[ty(&[4, 8, 15])], &[&[tile(2)][..], &dims[..]].concat())
        .unwrap_err();
    assert!(err.contains("≥16"), "{err}");
    assert_eq!(
        rel("nn.contrib_winograd_tiles_to_nchw", &[ty(&[4, 8, 16])], &[&[tile(2)][..], &dims[..]].concat()),
        Ok(ty(&[1, 8, 7, 7]))
    );
    // Hostile sizes: a tile count that overflows, a result over the size limit.
    let huge = [("batch", i32::MAX as i64), ("height", i32::MAX as i64), ("width", i32::MAX as i64)]
        .map(|(k, d)| (k, AttrValue::Int(d)));
    let err = rel("nn.contrib_winograd_tiles_to_nchw", &[ty(&[4, 8, 16])], &[&[tile(2)][..], &huge[..]].concat())
        .unwrap_err();
    assert!(err.contains("too many tiles"), "{err}");
    let pads = ("padding", ints(&[i32::MAX as i64, i32::MAX as i64, i32::MAX as i64, i32::MAX as i64]));
    let err = rel("nn.contrib_winograd_input_transform", &[ty(&[1, 3, 9, 9])], &[tile(2), pads]).unwrap_err();
    assert!(err.contains("kiln allows"), "{err}");
}

/// TVM's `out_dtype` on the products and the convolution: empty or the
/// operands' dtype is accepted; another dtype is refused, never ignored.
#[test]
fn out_dtype_is_the_operands_dtype_or_refused() {
    let od = |v: &str| [("out_dtype", AttrValue::Str(v.into()))];
    for v in ["", "float32", "float"] {
        assert_eq!(rel("nn.conv2d", &[ty(&[1, 2, 5, 5]), ty(&[3, 2, 3, 3])], &od(v)), Ok(ty(&[1, 3, 3, 3])), "{v}");
        assert_eq!(rel("nn.dense", &[ty(&[2, 4]), ty(&[3, 4])], &od(v)), Ok(ty(&[2, 3])), "{v}");
    }
    let err = rel("nn.batch_matmul", &[ty(&[2, 3, 4]), ty(&[2, 4, 5])], &od("int32")).unwrap_err();
    assert!(err.contains("out_dtype=int32 differs from the operands' float32"), "{err}");
    let err = rel("nn.matmul", &[ty(&[2, 4]), ty(&[4, 3])], &od("float128")).unwrap_err();
    assert!(err.contains("unknown out_dtype \"float128\""), "{err}");
}
