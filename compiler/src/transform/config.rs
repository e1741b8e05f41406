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
    /// Named fields of the scalar kinds above, each with a default (TVM's
    /// attrs-typed keys such as `tir.UnrollLoop`): given as a map, unknown
    /// fields are refused and absent ones take their defaults.
    Map,
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
    /// A field a map-valued key does not have.
    #[error("config key `{key}` has no field `{field}`; its fields: {valid}")]
    UnknownField {
        /// The key.
        key: String,
        /// The field given.
        field: String,
        /// Every field, `name (kind, default value: meaning)`, separated by `; `.
        valid: String,
    },
    /// A field's value is of another kind than the field's.
    #[error("field `{field}` of config key `{key}` takes a {expected}, given a {given}")]
    WrongFieldKind {
        /// The key.
        key: String,
        /// The field.
        field: String,
        /// The field's kind.
        expected: ConfigKind,
        /// The kind of the value given.
        given: ConfigKind,
    },
    /// Text that is not a value of the key (or of one of its fields).
    #[error("config key `{key}` takes {expected}, not `{text}`")]
    Unparsable {
        /// The key.
        key: String,
        /// What it takes.
        expected: String,
        /// The text given.
        text: String,
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
    /// Named field values (for [`ConfigKind::Map`] keys).
    Map(BTreeMap<String, ConfigValue>),
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
            ConfigValue::Map(_) => ConfigKind::Map,
        }
    }

    /// Parse command-line text as a value of a scalar `kind` (a map needs its
    /// key's fields: [`parse_config`]).
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
            ConfigKind::Map => return None,
        })
    }
}

impl fmt::Display for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigValue::Bool(v) => write!(f, "{v}"),
            ConfigValue::Int(v) => write!(f, "{v}"),
            ConfigValue::Float(v) => write!(f, "{v}"),
            ConfigValue::Str(v) => write!(f, "{v:?}"),
            ConfigValue::StrList(v) => write!(f, "{}", v.join(",")),
            ConfigValue::Map(m) => {
                let fields: Vec<String> = m.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                write!(f, "{{{}}}", fields.join(", "))
            }
        }
    }
}

impl ConfigKind {
    /// "a bool", "an int", ...
    fn with_article(self) -> String {
        match self {
            ConfigKind::Int => "an int".into(),
            k => format!("a {k}"),
        }
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
            ConfigKind::Map => "map",
        })
    }
}

/// One field of a map-valued key.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigField {
    /// The field's name.
    pub name: String,
    /// Its (scalar) kind.
    pub kind: ConfigKind,
    /// The value it takes when not given.
    pub default: ConfigValue,
    /// What it means.
    pub doc: String,
}

impl ConfigField {
    /// A field of `kind` whose default is `default`.
    pub fn new(name: &str, default: ConfigValue, doc: &str) -> ConfigField {
        ConfigField { name: name.into(), kind: default.kind(), default, doc: doc.into() }
    }
}

/// A registered key: its kind, meaning and (for a map) its fields.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigKey {
    /// The key.
    pub name: String,
    /// The kind of value it takes.
    pub kind: ConfigKind,
    /// What it means.
    pub doc: String,
    /// The fields of a [`ConfigKind::Map`] key (empty otherwise).
    pub fields: Vec<ConfigField>,
}

impl ConfigKey {
    /// `name (kind, default: meaning); …` for every field.
    fn fields_text(&self) -> String {
        let f: Vec<String> =
            self.fields.iter().map(|f| format!("{} ({}, default {}: {})", f.name, f.kind, f.default, f.doc)).collect();
        f.join("; ")
    }
}

fn keys() -> &'static RwLock<BTreeMap<String, ConfigKey>> {
    static KEYS: OnceLock<RwLock<BTreeMap<String, ConfigKey>>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut m = BTreeMap::new();
        let mut add = |k: &str, kind, doc: &str, fields: Vec<ConfigField>| {
            m.insert(k.to_string(), ConfigKey { name: k.to_string(), kind, doc: doc.to_string(), fields });
        };
        add(
            "relay.FoldConstant.max_bytes",
            ConfigKind::Int,
            "the most memory one FoldConstant evaluation may take: result + 16 bytes per element (default 256 MiB)",
            vec![],
        );
        add(
            "relay.AlterOpLayout.winograd",
            ConfigKind::Bool,
            "rewrite 3 × 3 stride-1 convolutions with constant weights as Winograd convolutions where the cost rule picks them (default true; false keeps every convolution direct)",
            vec![],
        );
        add(
            "relay.SimplifyInference.layer_norm",
            ConfigKind::Bool,
            "expand nn.layer_norm into means, a subtraction and a division (TVM's SimplifyInference; default true, false on CPU targets, which compute it as one kernel)",
            vec![],
        );
        add(
            "relay.IntegerConv2d.enable",
            ConfigKind::Bool,
            "compute convolutions whose operands are provably bytes (quantized models) as int8 dot products (default: true where the target has AVX-512 VNNI)",
            vec![],
        );
        add(
            "relay.IntegerConv2d.amx",
            ConfigKind::Bool,
            "compute the int8 convolutions that fit AMX tiles (stride 1, whole blocks of 16 output channels) with AMX tile products (default: true where the target has amx-int8; LLVM backend)",
            vec![],
        );
        add(
            "tir.amx",
            ConfigKind::Bool,
            "schedule the int8 and bfloat16 kernels made for AMX (OHWI convolutions, the bf16 precision's products) on AMX tiles (default: true where an `llvm` target has amx-tile; elsewhere they compute the same values without tiles)",
            vec![],
        );
        add(
            "relay.Bf16Precision.enable",
            ConfigKind::Bool,
            "compute the convolutions that fit AMX tiles as bfloat16 products summed in float32 (the bf16 precision: `--precision bf16`; default false; needs amx-bf16)",
            vec![],
        );
        add(
            "relay.Bf16Precision.min_macs",
            ConfigKind::Int,
            "the fewest multiply-adds a convolution or product computes in bf16 (default 1048576: smaller ones spend more rounding their data than the tiles save)",
            vec![],
        );
        add(
            "relay.ByteActivations.enable",
            ConfigKind::Bool,
            "store a kernel output that is provably 256 integers or fewer (a quantized model's) as uint8 between kernels (default false: exact, not yet faster; CPU pipeline)",
            vec![],
        );
        add("relay.FuseOps.max_depth", ConfigKind::Int, "the most operators FuseOps puts in one kernel (default 256)", vec![]);
        add("tir.fast_math", ConfigKind::Bool, "allow fast-math (reassociating, NaN-ignoring) floating-point code", vec![]);
        add(
            "tir.vector_lanes",
            ConfigKind::Int,
            "f32 lanes of the target's vector registers (default: from the target)",
            vec![],
        );
        add("tir.vector_registers", ConfigKind::Int, "vector registers of the target CPU (default: from the target)", vec![]);
        add("kiln.threads", ConfigKind::Int, "threads for the parallel kernels of `kiln run`", vec![]);
        add(
            "tir.UnrollLoop",
            ConfigKind::Map,
            "how tir.UnrollLoop unrolls (TVM's UnrollLoopConfig fields that kiln implements)",
            vec![
                ConfigField::new(
                    "auto_max_step",
                    ConfigValue::Int(0),
                    "also unroll serial loops of constant extent whose iterations, inner loops included, are at most this many (0: only loops the schedule marks)",
                ),
                ConfigField::new(
                    "auto_max_depth",
                    ConfigValue::Int(8),
                    "the deepest loop nest (counted from its innermost loop) auto_max_step unrolls",
                ),
                ConfigField::new(
                    "auto_max_extent",
                    ConfigValue::Int(0),
                    "the longest loop auto_max_step unrolls (0: no limit besides auto_max_step)",
                ),
                ConfigField::new(
                    "explicit_unroll",
                    ConfigValue::Bool(true),
                    "unroll in the TIR; false only marks the loops (`T.unroll`) and leaves them to the code generator",
                ),
            ],
        );
        RwLock::new(m)
    })
}

/// Every registered key, sorted by name (what `kiln passes` lists).
pub fn config_keys() -> Vec<ConfigKey> {
    keys().read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect()
}

fn key_spec(name: &str) -> Result<ConfigKey, ConfigError> {
    let k = keys().read().unwrap_or_else(|e| e.into_inner());
    k.get(name).cloned().ok_or_else(|| {
        let valid: Vec<String> = k.values().map(|s| format!("{} ({}: {})", s.name, s.kind, s.doc)).collect();
        ConfigError::UnknownKey { key: name.to_string(), valid: valid.join("; ") }
    })
}

/// `value` checked against `key`'s registration; a map gets its defaults
/// filled in and its unknown or mistyped fields refused.
pub(crate) fn normalize_config(key: &str, value: ConfigValue) -> Result<ConfigValue, ConfigError> {
    let spec = key_spec(key)?;
    if value.kind() != spec.kind {
        return Err(ConfigError::WrongKind { key: key.to_string(), expected: spec.kind, given: value.kind() });
    }
    let ConfigValue::Map(given) = value else { return Ok(value) };
    let mut out = BTreeMap::new();
    for (field, v) in given {
        let Some(f) = spec.fields.iter().find(|f| f.name == field) else {
            return Err(ConfigError::UnknownField { key: key.to_string(), field, valid: spec.fields_text() });
        };
        if v.kind() != f.kind {
            return Err(ConfigError::WrongFieldKind { key: key.to_string(), field, expected: f.kind, given: v.kind() });
        }
        out.insert(field, v);
    }
    for f in &spec.fields {
        out.entry(f.name.clone()).or_insert_with(|| f.default.clone());
    }
    Ok(ConfigValue::Map(out))
}

/// Parse command-line text for `key`: a scalar as its kind, a map as
/// `{field: value, …}` or `field=value,…` (each value as its field's kind).
pub fn parse_config(key: &str, text: &str) -> Result<ConfigValue, ConfigError> {
    let spec = key_spec(key)?;
    let unparsable =
        |expected: String| ConfigError::Unparsable { key: key.to_string(), expected, text: text.to_string() };
    if spec.kind != ConfigKind::Map {
        return ConfigValue::parse(spec.kind, text).ok_or_else(|| unparsable(spec.kind.with_article()));
    }
    let inner = text.trim();
    let inner = inner.strip_prefix('{').and_then(|t| t.strip_suffix('}')).unwrap_or(inner);
    let mut map = BTreeMap::new();
    for part in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (field, v) = part
            .split_once(['=', ':'])
            .ok_or_else(|| unparsable(format!("fields `name=value` or `{{name: value}}` ({})", spec.fields_text())))?;
        let field = field.trim().trim_matches('"');
        let Some(f) = spec.fields.iter().find(|f| f.name == field) else {
            return Err(ConfigError::UnknownField { key: key.into(), field: field.into(), valid: spec.fields_text() });
        };
        let value = ConfigValue::parse(f.kind, v.trim())
            .ok_or_else(|| unparsable(format!("{} for `{field}` (given `{}`)", f.kind.with_article(), v.trim())))?;
        map.insert(field.to_string(), value);
    }
    normalize_config(key, ConfigValue::Map(map))
}

/// Register `key`; registering the same key again is fine when nothing differs
/// but the text, an error when its kind or fields do.
fn register(key: ConfigKey) -> Result<(), ConfigError> {
    let mut k = keys().write().unwrap_or_else(|e| e.into_inner());
    match k.get(&key.name) {
        Some(spec) if spec.kind != key.kind || spec.fields != key.fields => {
            Err(ConfigError::AlreadyRegistered { key: key.name.clone(), registered: spec.kind })
        }
        _ => {
            k.insert(key.name.clone(), key);
            Ok(())
        }
    }
}

/// Register a configuration key (idempotent for the same kind).
pub fn register_config_key(name: &str, kind: ConfigKind, doc: &str) -> Result<(), ConfigError> {
    register(ConfigKey { name: name.into(), kind, doc: doc.into(), fields: vec![] })
}

/// Register a map-valued key with its fields (idempotent for the same fields).
pub fn register_config_map(name: &str, doc: &str, fields: Vec<ConfigField>) -> Result<(), ConfigError> {
    register(ConfigKey { name: name.into(), kind: ConfigKind::Map, doc: doc.into(), fields })
}

/// The kind of a registered key, or an error listing the valid keys.
pub fn config_kind(name: &str) -> Result<ConfigKind, ConfigError> {
    key_spec(name).map(|k| k.kind)
}
