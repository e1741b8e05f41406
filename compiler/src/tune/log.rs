//! The tuning log: what `kiln tune` found, kept in the user's crate and read
//! by every build. A small JSON file, sorted (by CPU, features, kernel key)
//! and pretty-printed one field per line, so that a re-tune shows as a
//! reviewable diff. A record applies only to a target with the same CPU and
//! features it was measured on; a record that does not fit its kernel any
//! more is ignored by the schedule, which says why in the kernel's `tuning`
//! attribute.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::schedule::{ConvOrder, Knobs};
use crate::target::TargetDescription;

/// The `format` field of every log kiln writes.
pub const FORMAT: &str = "kiln-tuning/1";

/// One kernel's best schedule point on one CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct TuningRecord {
    /// [`crate::schedule::kernel_key`] of the kernel.
    pub key: String,
    /// Its name when tuned (for the reader; keys identify it).
    pub kernel: String,
    /// Its anchor operator.
    pub anchor: String,
    /// The CPU and features it was measured on ([`TargetDescription`]).
    pub cpu: String,
    pub features: Vec<String>,
    /// The threads it was measured at.
    pub threads: usize,
    pub knobs: Knobs,
    /// Median microseconds at `knobs`, and with the rule's schedule, measured interleaved.
    pub tuned_us: f64,
    pub default_us: f64,
}

/// Records for any number of CPUs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TuningLog {
    pub records: Vec<TuningRecord>,
}

/// A log that cannot be read: the file, or text that is not JSON.
#[derive(Debug, thiserror::Error)]
pub enum TuningLogError {
    #[error("{path}: cannot read the tuning log: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: the tuning log is not JSON: {source}")]
    NotJson { path: String, source: serde_json::Error },
}

impl TuningLog {
    /// Reads `path`; records that are not well-formed are left out, each with
    /// a warning (the build then uses the rule for their kernels).
    pub fn read(path: &Path) -> Result<(TuningLog, Vec<String>), TuningLogError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| TuningLogError::Io { path: shown.clone(), source: e })?;
        let (log, warnings) =
            TuningLog::parse(&text).map_err(|e| TuningLogError::NotJson { path: shown.clone(), source: e })?;
        Ok((log, warnings.into_iter().map(|w| format!("{shown}: {w}")).collect()))
    }

    /// The log in `text`; an error only when it is not JSON.
    pub fn parse(text: &str) -> Result<(TuningLog, Vec<String>), serde_json::Error> {
        let v: Value = serde_json::from_str(text)?;
        let mut warnings = Vec::new();
        match v.get("format").and_then(Value::as_str) {
            Some(FORMAT) => {}
            Some(other) => {
                warnings.push(format!("format `{other}` is not `{FORMAT}`; records read as far as they fit"))
            }
            None => warnings.push(format!("no `format` field (`{FORMAT}` expected)")),
        }
        let mut log = TuningLog::default();
        match v.get("records").and_then(Value::as_array) {
            Some(records) => {
                for (i, r) in records.iter().enumerate() {
                    match record_from_json(r) {
                        Ok(r) => log.records.push(r),
                        Err(why) => warnings.push(format!("record {i} ignored: {why}")),
                    }
                }
            }
            None => warnings.push("no `records` array: nothing to apply".into()),
        }
        Ok((log, warnings))
    }

    /// The log as kiln writes it: records sorted, one field per line.
    pub fn to_json(&self) -> String {
        let mut records = self.records.clone();
        records.sort_by(|a, b| (&a.cpu, &a.features, &a.key).cmp(&(&b.cpu, &b.features, &b.key)));
        let records: Vec<Value> = records.iter().map(record_to_json).collect();
        let mut text = serde_json::to_string_pretty(&json!({ "format": FORMAT, "records": records }))
            .expect("a JSON value always serializes");
        text.push('\n');
        text
    }

    /// The knobs by kernel key for `target`, and a sentence for the records
    /// left out because they were measured on another CPU (None when none was).
    pub fn knobs_for(&self, target: &TargetDescription) -> (BTreeMap<String, Knobs>, Option<String>) {
        let mut knobs = BTreeMap::new();
        let mut other: BTreeMap<String, usize> = BTreeMap::new();
        for r in &self.records {
            if r.cpu == target.cpu && r.features == target.features {
                knobs.insert(r.key.clone(), r.knobs.clone());
            } else {
                *other.entry(format!("{} ({})", r.cpu, r.features.join(" "))).or_default() += 1;
            }
        }
        let why = (!other.is_empty()).then(|| {
            let list: Vec<String> = other.iter().map(|(cpu, n)| format!("{n} for {cpu}")).collect();
            format!(
                "{} tuning record(s) measured on other CPUs or features left out ({}); this build is for {} ({}), \
                 whose kernels use the rule where no record of their own exists",
                other.values().sum::<usize>(),
                list.join("; "),
                target.cpu,
                target.features.join(" ")
            )
        });
        (knobs, why)
    }

    /// The knobs that the log at `path` gives `target`, with the warnings a
    /// build reports (ill-formed records, records for other CPUs); an error
    /// only when the file cannot be read or is not JSON.
    pub fn knobs_from_file(
        path: &Path,
        target: &TargetDescription,
    ) -> Result<(BTreeMap<String, Knobs>, Vec<String>), TuningLogError> {
        let (log, mut warnings) = TuningLog::read(path)?;
        let (knobs, other) = log.knobs_for(target);
        warnings.extend(other.map(|w| format!("{}: {w}", path.display())));
        Ok((knobs, warnings))
    }

    /// Adds `records`, replacing any for the same kernel on the same CPU and features.
    pub fn merge(&mut self, records: Vec<TuningRecord>) {
        for r in records {
            self.records.retain(|o| !(o.key == r.key && o.cpu == r.cpu && o.features == r.features));
            self.records.push(r);
        }
    }
}

/// Microseconds to one decimal: a re-tune's diff shows changes, not noise digits.
fn rounded(us: f64) -> f64 {
    (us * 10.0).round() / 10.0
}

fn record_to_json(r: &TuningRecord) -> Value {
    let mut knobs = Map::new();
    if let Some(v) = r.knobs.rows {
        knobs.insert("rows".into(), json!(v));
    }
    if let Some(v) = r.knobs.cols {
        knobs.insert("cols".into(), json!(v));
    }
    if let Some(o) = r.knobs.order {
        knobs.insert("order".into(), json!(o.name()));
    }
    if r.knobs.serial {
        knobs.insert("serial".into(), json!(true));
    }
    json!({
        "key": r.key,
        "kernel": r.kernel,
        "anchor": r.anchor,
        "cpu": r.cpu,
        // One line: the features as `lscpu`-style words.
        "features": r.features.join(" "),
        "threads": r.threads,
        "knobs": knobs,
        "tuned_us": rounded(r.tuned_us),
        "default_us": rounded(r.default_us),
    })
}

fn record_from_json(v: &Value) -> Result<TuningRecord, String> {
    let text = |name: &str| v.get(name).and_then(Value::as_str).map(String::from).ok_or(format!("no string `{name}`"));
    let number = |name: &str| v.get(name).and_then(Value::as_f64).ok_or(format!("no number `{name}`"));
    let features: Vec<String> = text("features")?.split_whitespace().map(String::from).collect();
    let k = v.get("knobs").and_then(Value::as_object).ok_or("no object `knobs`")?;
    let mut knobs = Knobs::default();
    for (name, value) in k {
        match name.as_str() {
            "rows" | "cols" => {
                let n = value.as_i64().filter(|n| (1..=4096).contains(n)).ok_or(format!("knob `{name}`: {value}"))?;
                if name == "rows" {
                    knobs.rows = Some(n);
                } else {
                    knobs.cols = Some(n);
                }
            }
            "order" => {
                let names: Vec<&str> = ConvOrder::ALL.iter().map(|o| o.name()).collect();
                knobs.order = Some(
                    value
                        .as_str()
                        .and_then(ConvOrder::from_name)
                        .ok_or(format!("knob `order`: {value} (one of {})", names.join(", ")))?,
                );
            }
            "serial" => knobs.serial = value.as_bool().ok_or(format!("knob `serial`: {value}"))?,
            other => return Err(format!("unknown knob `{other}` (rows, cols, order, serial)")),
        }
    }
    let key = text("key")?;
    if key.len() != 16 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("`key` {key:?} is not 16 hex digits"));
    }
    Ok(TuningRecord {
        key,
        kernel: text("kernel").unwrap_or_default(),
        anchor: text("anchor").unwrap_or_default(),
        cpu: text("cpu")?,
        features,
        threads: number("threads").unwrap_or(1.0).max(1.0) as usize,
        knobs,
        tuned_us: number("tuned_us").unwrap_or(0.0),
        default_us: number("default_us").unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, cpu: &str) -> TuningRecord {
        TuningRecord {
            key: key.into(),
            kernel: "fused_nn_conv2d".into(),
            anchor: "nn.conv2d".into(),
            cpu: cpu.into(),
            features: vec!["avx2".into(), "fma".into()],
            threads: 1,
            knobs: Knobs { rows: Some(2), cols: Some(7), order: Some(ConvOrder::Rows), serial: true },
            tuned_us: 10.04,
            default_us: 12.0,
        }
    }

    #[test]
    fn a_log_round_trips_sorted() {
        let log =
            TuningLog { records: vec![record("00000000000000ff", "znver3"), record("0000000000000001", "haswell")] };
        let text = log.to_json();
        let (back, warnings) = TuningLog::parse(&text).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(back.records[0].cpu, "haswell");
        assert_eq!(back.records[1].knobs, log.records[0].knobs);
        assert_eq!(back.records[1].tuned_us, 10.0);
        // Written again, byte for byte the same.
        assert_eq!(back.to_json(), text);
    }

    #[test]
    fn bad_records_are_warnings_and_bad_json_an_error() {
        let text = r#"{"format": "kiln-tuning/1", "records": [
            {"key": "xyz", "cpu": "znver3", "features": "", "knobs": {}},
            {"key": "0000000000000001", "cpu": "znver3", "features": "", "knobs": {"tile": 3}},
            {"key": "0000000000000002", "cpu": "znver3", "features": "", "knobs": {"order": "diagonal"}},
            {"key": "0000000000000003", "cpu": "znver3", "features": "avx2 fma", "knobs": {"rows": 4}}
        ]}"#;
        let (log, warnings) = TuningLog::parse(text).unwrap();
        assert_eq!(log.records.len(), 1);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        assert!(warnings[1].contains("unknown knob `tile`"), "{warnings:?}");
        assert!(warnings[2].contains("one of rows, channels_padded_once"), "{warnings:?}");
        assert!(TuningLog::parse("{\"records\": [").is_err());
    }

    #[test]
    fn records_of_other_cpus_are_left_out_with_a_reason() {
        let log =
            TuningLog { records: vec![record("0000000000000001", "znver3"), record("0000000000000002", "haswell")] };
        let target = TargetDescription {
            target: "llvm -mcpu=znver3".into(),
            triple: "x86_64-unknown-linux-gnu".into(),
            cpu: "znver3".into(),
            features: vec!["avx2".into(), "fma".into()],
            f32_lanes: 8,
            vector_registers: 16,
        };
        let (knobs, why) = log.knobs_for(&target);
        assert_eq!(knobs.len(), 1);
        assert!(knobs.contains_key("0000000000000001"));
        assert!(why.unwrap().contains("1 for haswell (avx2 fma)"));
    }
}
