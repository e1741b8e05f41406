//! This test exists to show that kiln builds beside rust-protobuf 3.7: a user
//! crate whose other dependencies need `protobuf` >= 3.5 can use kiln's ONNX
//! import. kiln used to depend on `onnx-protobuf`, whose generated code
//! required exactly `protobuf = "=3.4.0"`, so such a crate did not resolve;
//! its ONNX message types are now prost code generated from a vendored
//! `onnx.proto`, with no protobuf pin. Both runtimes are linked into this one
//! test binary and speak the same wire format.

use kiln::frontend::onnx::{self, proto};
use protobuf::well_known_types::wrappers::StringValue;
use protobuf::Message as _;

/// `y = relu(x)` over a [1, 4] float input, built with kiln's ONNX types.
fn relu_model() -> Vec<u8> {
    use proto::tensor_shape_proto::{dimension, Dimension};
    use proto::ValueInfoProto;
    use proto::{type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto};
    let value = |name: &str| {
        let dim = |d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() };
        let shape = TensorShapeProto { dim: vec![dim(1), dim(4)] };
        let tt = type_proto::Tensor { elem_type: Some(1), shape: Some(shape) };
        let ty = TypeProto { value: Some(type_proto::Value::TensorType(tt)), ..Default::default() };
        ValueInfoProto { name: Some(name.into()), r#type: Some(ty), ..Default::default() }
    };
    let relu = NodeProto {
        op_type: Some("Relu".into()),
        name: Some("relu".into()),
        input: vec!["x".into()],
        output: vec!["y".into()],
        ..Default::default()
    };
    let graph =
        GraphProto { input: vec![value("x")], output: vec![value("y")], node: vec![relu], ..Default::default() };
    let opset = OperatorSetIdProto { version: Some(17), ..Default::default() };
    let model = ModelProto { ir_version: Some(8), opset_import: vec![opset], graph: Some(graph), ..Default::default() };
    prost::Message::encode_to_vec(&model)
}

#[test]
fn kiln_onnx_import_links_beside_protobuf_3_7() {
    let (major, minor) = protobuf::VERSION.split_once('.').expect("a version");
    let minor: u32 = minor.split('.').next().and_then(|m| m.parse().ok()).expect("a minor version");
    assert!(major == "3" && minor >= 7, "rust-protobuf {} linked, the test wants 3.7 or later", protobuf::VERSION);

    let module = onnx::import(&relu_model(), &[]).expect("import");
    let text = kiln::relay::print_module(&module);
    assert!(text.contains("nn.relu(%x)"), "{text}");

    // rust-protobuf 3.7 writes a message that kiln's prost types read: field 1
    // of `google.protobuf.StringValue` is a string, as is `domain` (field 1)
    // of ONNX's `OperatorSetIdProto`.
    let mut s = StringValue::new();
    s.value = "ai.onnx".into();
    let bytes = s.write_to_bytes().expect("protobuf 3.7 encodes");
    let opset: proto::OperatorSetIdProto = prost::Message::decode(bytes.as_slice()).expect("prost decodes");
    assert_eq!(opset.domain(), "ai.onnx");
    assert_eq!(opset.version, None);
}
