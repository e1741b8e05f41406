//! The data-movement and creation operators: type relations with their
//! errors, and reference implementations against hand-computed values.

use kiln_ir::attrs::{AttrValue, Attrs};
use kiln_ir::relay::{op_registry, Type, Value};
use kiln_ir::{DataType, Tensor};

fn attrs(op: &str, given: &[(&str, AttrValue)]) -> Result<Attrs, String> {
    let def = op_registry().by_name(op).expect("registered");
    Attrs::normalize(&Attrs::from_pairs(given.iter().map(|(k, v)| (*k, v.clone()))), &def.attrs, op)
        .map_err(String::from)
}

fn rel(op: &str, args: &[Type], given: &[(&str, AttrValue)]) -> Result<Type, String> {
    (op_registry().by_name(op).expect("registered").type_rel)(args, &attrs(op, given)?).map_err(String::from)
}

fn eval(op: &str, args: &[Value], given: &[(&str, AttrValue)]) -> Value {
    (op_registry().by_name(op).expect("registered").eval)(args, &attrs(op, given).expect("attrs")).expect("eval")
}

fn t(shape: &[usize]) -> Value {
    let n: usize = shape.iter().product();
    Value::Tensor(Tensor::from_f64(DataType::F32, shape.to_vec(), &(0..n).map(|i| i as f64).collect::<Vec<_>>()))
}

fn ty(shape: &[usize]) -> Type {
    Type::tensor(shape.to_vec(), DataType::F32)
}

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

fn data(v: &Value) -> (Vec<usize>, Vec<f64>) {
    let t = v.as_tensor().expect("tensor");
    (t.shape().to_vec(), t.to_f64_vec())
}

#[test]
fn reshape_family() {
    assert_eq!(rel("reshape", &[ty(&[2, 3, 4])], &[("newshape", ints(&[0, -1]))]).unwrap(), ty(&[2, 12]));
    assert_eq!(rel("reshape", &[ty(&[2, 3, 4])], &[("newshape", ints(&[-1, 2]))]).unwrap(), ty(&[12, 2]));
    assert!(rel("reshape", &[ty(&[2, 3])], &[("newshape", ints(&[4, 2]))]).unwrap_err().contains("cannot reshape"));
    assert!(rel("reshape", &[ty(&[2, 3])], &[("newshape", ints(&[-1, -1]))]).unwrap_err().contains("more than one -1"));
    assert_eq!(
        data(&eval("reshape", &[t(&[2, 3])], &[("newshape", ints(&[3, 2]))])),
        (vec![3, 2], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    );
    assert_eq!(rel("nn.batch_flatten", &[ty(&[2, 3, 4])], &[]).unwrap(), ty(&[2, 12]));
    assert_eq!(rel("squeeze", &[ty(&[1, 3, 1])], &[]).unwrap(), ty(&[3]));
    assert_eq!(rel("squeeze", &[ty(&[1, 3, 1])], &[("axis", ints(&[-1]))]).unwrap(), ty(&[1, 3]));
    assert!(rel("squeeze", &[ty(&[1, 3, 1])], &[("axis", ints(&[1]))]).unwrap_err().contains("cannot squeeze axis 1"));
    assert_eq!(
        rel("expand_dims", &[ty(&[3])], &[("axis", AttrValue::Int(0)), ("num_newaxis", AttrValue::Int(2))]).unwrap(),
        ty(&[1, 1, 3])
    );
    assert_eq!(rel("expand_dims", &[ty(&[3])], &[("axis", AttrValue::Int(-1))]).unwrap(), ty(&[3, 1]));
    assert!(rel("expand_dims", &[ty(&[3])], &[("axis", AttrValue::Int(3))]).unwrap_err().contains("out of range"));
}

#[test]
fn transpose() {
    assert_eq!(rel("transpose", &[ty(&[2, 3, 4])], &[]).unwrap(), ty(&[4, 3, 2]));
    assert_eq!(rel("transpose", &[ty(&[2, 3, 4])], &[("axes", ints(&[1, 0, 2]))]).unwrap(), ty(&[3, 2, 4]));
    assert!(rel("transpose", &[ty(&[2, 3])], &[("axes", ints(&[0, 0]))]).unwrap_err().contains("not a permutation"));
    assert!(rel("transpose", &[ty(&[2, 3])], &[("axes", ints(&[0]))]).unwrap_err().contains("rank 2"));
    // [[0, 1, 2], [3, 4, 5]]ᵀ
    assert_eq!(data(&eval("transpose", &[t(&[2, 3])], &[])), (vec![3, 2], vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]));
}

#[test]
fn concatenate_and_split() {
    let pair = Type::Tuple(vec![ty(&[2, 1]), ty(&[2, 2])]);
    assert_eq!(rel("concatenate", &[pair], &[("axis", AttrValue::Int(1))]).unwrap(), ty(&[2, 3]));
    let bad = Type::Tuple(vec![ty(&[2, 1]), ty(&[3, 2])]);
    assert!(rel("concatenate", &[bad], &[("axis", AttrValue::Int(1))]).unwrap_err().contains("cannot concatenate"));
    let mixed = Type::Tuple(vec![ty(&[2]), Type::tensor([2], DataType::I32)]);
    assert!(rel("concatenate", &[mixed], &[]).unwrap_err().contains("dtype mismatch"));
    let out = eval("concatenate", &[Value::Tuple(vec![t(&[2, 1]), t(&[2, 2])])], &[("axis", AttrValue::Int(1))]);
    assert_eq!(data(&out), (vec![2, 3], vec![0.0, 0.0, 1.0, 1.0, 2.0, 3.0]));
    let sections = [("indices_or_sections", AttrValue::Int(3))];
    assert_eq!(rel("split", &[ty(&[6, 2])], &sections).unwrap(), Type::Tuple(vec![ty(&[2, 2]); 3]));
    assert!(rel("split", &[ty(&[5, 2])], &sections).unwrap_err().contains("equal sections"));
    let at = [("indices_or_sections", ints(&[1, 3])), ("axis", AttrValue::Int(1))];
    let Value::Tuple(parts) = eval("split", &[t(&[1, 4])], &at) else { panic!("tuple") };
    let parts: Vec<Vec<f64>> = parts.iter().map(|p| data(p).1).collect();
    assert_eq!(parts, vec![vec![0.0], vec![1.0, 2.0], vec![3.0]]);
    assert!(rel("split", &[ty(&[4])], &[("indices_or_sections", ints(&[3, 1]))]).unwrap_err().contains("increasing"));
}

#[test]
fn strided_slice() {
    let s = [("begin", ints(&[1, 0])), ("end", ints(&[3, 4])), ("strides", ints(&[1, 2]))];
    assert_eq!(rel("strided_slice", &[ty(&[4, 4])], &s).unwrap(), ty(&[2, 2]));
    assert_eq!(data(&eval("strided_slice", &[t(&[4, 4])], &s)).1, vec![4.0, 6.0, 8.0, 10.0]);
    // Negative stride, negative indices, on axis 1 only: [3, 1] of each row.
    let r = [("begin", ints(&[-1])), ("end", ints(&[-5])), ("strides", ints(&[-2])), ("axes", ints(&[1]))];
    assert_eq!(data(&eval("strided_slice", &[t(&[2, 4])], &r)), (vec![2, 2], vec![3.0, 1.0, 7.0, 5.0]));
    // Out-of-range ends clamp like NumPy.
    let c = [("begin", ints(&[2])), ("end", ints(&[100]))];
    assert_eq!(data(&eval("strided_slice", &[t(&[4])], &c)).1, vec![2.0, 3.0]);
    let zero = [("begin", ints(&[0])), ("end", ints(&[2])), ("strides", ints(&[0]))];
    assert!(rel("strided_slice", &[ty(&[4])], &zero).unwrap_err().contains("stride of 0"));
}

#[test]
fn creation() {
    let a = [("shape", ints(&[2, 2])), ("dtype", AttrValue::Str("int32".into()))];
    assert_eq!(rel("zeros", &[], &a).unwrap(), Type::tensor([2, 2], DataType::I32));
    assert_eq!(data(&eval("ones", &[], &a)).1, vec![1.0; 4]);
    let f = Value::Tensor(Tensor::scalar(DataType::F32, 2.5));
    assert_eq!(data(&eval("full", &[f], &[("shape", ints(&[3]))])).1, vec![2.5; 3]);
    assert!(rel("full", &[ty(&[2])], &[("shape", ints(&[3]))]).unwrap_err().contains("scalar"));
    assert!(rel("zeros", &[], &[("shape", ints(&[-1]))]).unwrap_err().contains("negative"));
}

#[test]
fn masks_and_lookups() {
    let f = |shape: &[usize], v: &[f64]| Value::Tensor(Tensor::from_f64(DataType::F32, shape.to_vec(), v));
    let (a, b) = (f(&[2, 2], &[1.0, 5.0, 3.0, 2.0]), f(&[2], &[2.0, 2.0]));
    assert_eq!(data(&eval("less", &[a.clone(), b.clone()], &[])).1, vec![1.0, 0.0, 0.0, 0.0]);
    assert_eq!(data(&eval("equal", &[a.clone(), b.clone()], &[])).1, vec![0.0, 0.0, 0.0, 1.0]);
    let mask = eval("less", &[a.clone(), b.clone()], &[]);
    assert_eq!(data(&eval("logical_not", std::slice::from_ref(&mask), &[])).1, vec![0.0, 1.0, 1.0, 1.0]);
    assert_eq!(data(&eval("where", &[mask, a.clone(), b.clone()], &[])).1, vec![1.0, 2.0, 2.0, 2.0]);
    assert!(rel("where", &[ty(&[2]), ty(&[2]), ty(&[2])], &[]).unwrap_err().contains("condition must be bool"));
    // take: rows of an embedding table, clipped or wrapped.
    let emb = t(&[3, 2]); // [[0, 1], [2, 3], [4, 5]]
    let ids = Value::Tensor(Tensor::from_i64(vec![3], &[2, -1, 7]));
    let rows = [("axis", AttrValue::Int(0))];
    assert_eq!(
        data(&eval("take", &[emb.clone(), ids.clone()], &rows)),
        (vec![3, 2], vec![4.0, 5.0, 0.0, 1.0, 4.0, 5.0])
    );
    let wrap = [("axis", AttrValue::Int(0)), ("mode", AttrValue::Str("wrap".into()))];
    assert_eq!(data(&eval("take", &[emb.clone(), ids.clone()], &wrap)).1, vec![4.0, 5.0, 4.0, 5.0, 2.0, 3.0]);
    assert_eq!(data(&eval("take", &[emb.clone(), ids], &[])).1, vec![2.0, 0.0, 5.0]);
    assert!(rel("take", &[ty(&[3, 2]), ty(&[2])], &[]).unwrap_err().contains("indices must be integers"));
    assert_eq!(data(&eval("broadcast_to", std::slice::from_ref(&b), &[("shape", ints(&[3, 2]))])).0, vec![3, 2]);
    assert!(rel("broadcast_to", &[ty(&[3])], &[("shape", ints(&[2, 2]))]).unwrap_err().contains("cannot broadcast"));
    assert_eq!(
        data(&eval("nn.leaky_relu", &[f(&[2], &[-2.0, 3.0])], &[("alpha", AttrValue::Float(0.5))])).1,
        vec![-1.0, 3.0]
    );
}
