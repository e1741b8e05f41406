//! Frontends: models from other formats into Relay.

pub mod onnx;
