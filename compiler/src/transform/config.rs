//! Typed pass configuration: only registered keys with declared kinds are accepted.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{OnceLock, RwLock};

/// The kind of value a configuration key takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigKind {
    /// `true`/`false` (on the command line also `1`/`0`, `True`/`False`).
    Bool,
    /// A 64-bit signed integer.
    Int,
    /// A 64-bit float.
    Float,
    /// Text.
    Str,
    /// Strings, comma-separated on the command line.
    StrList,
}

/// Why a configuration key or value is refused.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `valid` lists every registered key with its kind and meaning.
    #[error("unknown config key `{key}`; valid keys: {valid}")]
    UnknownKey {
        /// The key asked for.
        key: String,
        /// Every registered key, `name (kind: meaning)`, separated by `; `.
        valid: String,
    },
    /// The value's kind is not the key's.
    #[error("config key `{key}` takes a {expected}, given a {given}")]
    WrongKind {
        /// The key.
        key: String,
        /// The kind the key was registered with.
        expected: ConfigKind,
        /// The kind of the value given.
        given: ConfigKind,
    },
    /// A key was registered again with another kind.
    #[error("config key `{key}` is already registered as {registered}")]
    AlreadyRegistered {
        /// The key.
        key: String,
        /// The kind it already has.
        registered: ConfigKind,
    },
}

/// A configuration value.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigValue {
    /// `true` or `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// Text.
    Str(String),
    /// A list of strings.
    StrList(Vec<String>),
}

impl ConfigValue {
    /// The kind of this value.
    pub fn kind(&self) -> ConfigKind {
        match self {
            ConfigValue::Bool(_) => ConfigKind::Bool,
            ConfigValue::Int(_) => ConfigKind::Int,
            ConfigValue::Float(_) => ConfigKind::Float,
            ConfigValue::Str(_) => ConfigKind::Str,
            ConfigValue::StrList(_) => ConfigKind::StrList,
        }
    }

    /// Parse command-line text as a value of `kind`.
    pub fn parse(kind: ConfigKind, text: &str) -> Option<ConfigValue> {
        Some(match kind {
            ConfigKind::Bool => ConfigValue::Bool(match text {
                "true" | "1" | "True" => true,
                "false" | "0" | "False" => false,
                _ => return None,
            }),
            ConfigKind::Int => ConfigValue::Int(text.parse().ok()?),
            ConfigKind::Float => ConfigValue::Float(text.parse().ok()?),
            ConfigKind::Str => ConfigValue::Str(text.to_string()),
            ConfigKind::StrList => ConfigValue::StrList(text.split(',').map(|s| s.trim().to_string()).collect()),
        })
    }
}

impl fmt::Display for ConfigKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigKind::Bool => "bool",
            ConfigKind::Int => "int",
            ConfigKind::Float => "float",
            ConfigKind::Str => "string",
            ConfigKind::StrList => "list of strings",
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct KeySpec {
    pub kind: ConfigKind,
    pub doc: String,
}

fn keys() -> &'static RwLock<BTreeMap<String, KeySpec>> {
    static KEYS: OnceLock<RwLock<BTreeMap<String, KeySpec>>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut m = BTreeMap::new();
        let mut add = |k: &str, kind, doc: &str| {
            m.insert(k.to_string(), KeySpec { kind, doc: doc.to_string() });
        };
        add(
            "relay.FoldConstant.max_bytes",
            ConfigKind::Int,
            "the most memory one FoldConstant evaluation may take: result + 16 bytes per element (default 256 MiB)",
        );
        add(
            "relay.AlterOpLayout.winograd",
            ConfigKind::Bool,
            "rewrite 3 × 3 stride-1 convolutions with constant weights as Winograd convolutions where the cost rule picks them (default true; false keeps every convolution direct)",
        );
        add("relay.FuseOps.max_depth", ConfigKind::Int, "the most operators FuseOps puts in one kernel (default 256)");
        add("tir.fast_math", ConfigKind::Bool, "allow fast-math (reassociating, NaN-ignoring) floating-point code");
        add(
            "tir.vector_lanes",
            ConfigKind::Int,
            "f32 lanes of the target's vector registers (default: from the target)",
        );
        add("tir.vector_registers", ConfigKind::Int, "vector registers of the target CPU (default: from the target)");
        add("kiln.threads", ConfigKind::Int, "threads for the parallel kernels of `kiln run`");
        RwLock::new(m)
    })
}

/// Register a configuration key (idempotent for the same kind).
pub fn register_config_key(name: &str, kind: ConfigKind, doc: &str) -> Result<(), ConfigError> {
    let mut k = keys().write().unwrap_or_else(|e| e.into_inner());
    match k.get(name) {
        Some(spec) if spec.kind != kind => {
            Err(ConfigError::AlreadyRegistered { key: name.to_string(), registered: spec.kind })
        }
        _ => {
            k.insert(name.to_string(), KeySpec { kind, doc: doc.to_string() });
            Ok(())
        }
    }
}

/// The kind of a registered key, or an error listing the valid keys.
pub fn config_kind(name: &str) -> Result<ConfigKind, ConfigError> {
    let k = keys().read().unwrap_or_else(|e| e.into_inner());
    match k.get(name) {
        Some(spec) => Ok(spec.kind),
        None => {
            let valid: Vec<String> = k.iter().map(|(n, s)| format!("{n} ({}: {})", s.kind, s.doc)).collect();
            Err(ConfigError::UnknownKey { key: name.to_string(), valid: valid.join("; ") })
        }
    }
}
