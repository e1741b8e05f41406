//! The schedule space of a kernel for `kiln tune`: [`Knobs`] are the choices
//! a strategy's rule makes (register tile, loop order, threads), each left
//! to the rule where unset; [`kernel_key`] names a kernel by its lowered
//! code, so that a record found by tuning applies to the same kernel in any
//! model; [`candidates`] lists the points of a kernel's space worth timing,
//! cheapest first by an analytic cost.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::target::VectorUnit;
use crate::tir::{ForKind, PrimFunc, Stmt};

/// One point of a kernel's schedule space. `Knobs::default()` is the rule's
/// choice; a knob that does not fit the kernel makes its strategy refuse the
/// whole point (the build then uses the rule and says why in the kernel's
/// `tuning` attribute).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Knobs {
    /// Rows of the register tile: vectors of output channels (packed
    /// convolution), output channels (pointwise), output rows (depthwise),
    /// rows (matrix products).
    pub rows: Option<i64>,
    /// Columns of the register tile: output columns (packed convolution),
    /// vectors of pixels (pointwise), columns (matrix products).
    pub cols: Option<i64>,
    /// The loop order of a packed convolution; for a depthwise one, where
    /// its padded image is computed (`Rows`: per block of output rows;
    /// `ChannelsPaddedOnce`: per channel, the rule).
    pub order: Option<ConvOrder>,
    /// Run on the calling thread only (a small kernel may not pay for the pool).
    pub serial: bool,
}

/// How a packed convolution walks its output and where its padded input lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConvOrder {
    /// Output rows outermost (in parallel), the padded rows computed per row.
    Rows,
    /// Blocks of output channels outermost (in parallel) over the whole
    /// image, padded once: each block's weights stay in cache.
    ChannelsPaddedOnce,
    /// Blocks of output channels outermost, the input read in place (1 × 1).
    ChannelsInPlace,
}

impl ConvOrder {
    pub const ALL: [ConvOrder; 3] = [ConvOrder::Rows, ConvOrder::ChannelsPaddedOnce, ConvOrder::ChannelsInPlace];

    /// The name in tuning logs.
    pub fn name(self) -> &'static str {
        match self {
            ConvOrder::Rows => "rows",
            ConvOrder::ChannelsPaddedOnce => "channels_padded_once",
            ConvOrder::ChannelsInPlace => "channels_in_place",
        }
    }

    pub fn from_name(name: &str) -> Option<ConvOrder> {
        ConvOrder::ALL.into_iter().find(|o| o.name() == name)
    }
}

impl std::fmt::Display for Knobs {
    /// `rows=2 cols=14 order=rows serial`, or `rule` for the default.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(r) = self.rows {
            parts.push(format!("rows={r}"));
        }
        if let Some(c) = self.cols {
            parts.push(format!("cols={c}"));
        }
        if let Some(o) = self.order {
            parts.push(format!("order={}", o.name()));
        }
        if self.serial {
            parts.push("serial".into());
        }
        if parts.is_empty() {
            parts.push("rule".into());
        }
        f.write_str(&parts.join(" "))
    }
}

/// The knobs the schedule applies, by [`kernel_key`], attached to a pass
/// context as an extension; and, when `recording`, what the schedule saw.
#[derive(Debug, Default)]
pub struct ScheduleTuning {
    pub knobs: BTreeMap<String, Knobs>,
    pub recording: Option<Recording>,
}

/// The tuner's view of a build, filled by `tir.DefaultSchedule`: per
/// kernel, its key and up to `limit` candidates for `threads` threads.
#[derive(Debug, Default)]
pub struct Recording {
    pub seen: Mutex<Vec<SeenKernel>>,
    pub threads: usize,
    pub limit: usize,
}

impl ScheduleTuning {
    /// Applies `knobs`, records nothing.
    pub fn applying(knobs: BTreeMap<String, Knobs>) -> Arc<ScheduleTuning> {
        Arc::new(ScheduleTuning { knobs, recording: None })
    }

    /// Applies `knobs` and records every kernel scheduled, with up to
    /// `limit` candidates each for `threads` threads.
    pub fn recording(knobs: BTreeMap<String, Knobs>, threads: usize, limit: usize) -> Arc<ScheduleTuning> {
        Arc::new(ScheduleTuning { knobs, recording: Some(Recording { seen: Mutex::new(Vec::new()), threads, limit }) })
    }

    /// What was recorded (empty when not recording).
    pub fn seen(&self) -> Vec<SeenKernel> {
        self.recording.as_ref().map(|r| r.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()).unwrap_or_default()
    }
}

/// A kernel as the schedule saw it while recording.
#[derive(Clone, Debug)]
pub struct SeenKernel {
    /// Its name in the plan.
    pub name: String,
    pub key: String,
    /// Its anchor operator (`nn.conv2d`, …; empty for none).
    pub anchor: String,
    /// Points of its space other than the rule's, cheapest first.
    pub candidates: Vec<Knobs>,
}

/// A kernel's identity for tuning: a hash of its lowered code (before any
/// schedule) without its name. FNV-1a, so that a log written by one kiln
/// build names the same kernels for another.
pub fn kernel_key(f: &PrimFunc) -> String {
    let mut unnamed = f.clone();
    unnamed.name = "kernel".into();
    let text = crate::tir::print_prim_func(&unnamed);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Makes every loop of `f` serial and says so (`tir.ParallelizeOuter`
/// leaves such a kernel alone).
pub(crate) fn make_serial(mut f: PrimFunc) -> PrimFunc {
    f.body = f.body.map_post(&mut |s| match s {
        Stmt::For(mut l) if l.kind == ForKind::Parallel => {
            l.kind = ForKind::Serial;
            Stmt::For(l)
        }
        s => s,
    });
    f.attrs.insert(SERIAL_ATTR.into(), "true".into());
    f
}

/// The attribute of a kernel that tuning keeps on one thread.
pub(crate) const SERIAL_ATTR: &str = "tuning.serial";

/// The points of `f`'s space other than the rule's that schedule without
/// error and differ from the rule's code, cheapest first by loads per
/// multiply-add of their register tile, at most `limit` of them. `threads`
/// above 1 adds the serial variants of the rule and of the best tiles.
pub fn candidates(f: &PrimFunc, unit: VectorUnit, threads: usize, limit: usize) -> Vec<Knobs> {
    let anchor = f.attrs.get("anchor").map(String::as_str).unwrap_or("");
    let mut space: Vec<Knobs> = Vec::new();
    let tiles = |rows: std::ops::RangeInclusive<i64>, cols: &[i64]| -> Vec<(i64, i64)> {
        rows.flat_map(|r| cols.iter().map(move |&c| (r, c))).collect()
    };
    let lanes = unit.f32_lanes as i64;
    match anchor {
        "nn.conv2d" => {
            // Up to what the registers hold (a 1 × 30 tile on AVX-512); the strategy refuses the rest.
            let cols: Vec<i64> = (1..=unit.registers as i64).collect();
            for (r, c) in tiles(1..=8, &cols) {
                for order in
                    [None, Some(ConvOrder::Rows), Some(ConvOrder::ChannelsPaddedOnce), Some(ConvOrder::ChannelsInPlace)]
                {
                    space.push(Knobs { rows: Some(r), cols: Some(c), order, serial: false });
                }
            }
            for order in ConvOrder::ALL {
                space.push(Knobs { order: Some(order), ..Knobs::default() });
            }
            // Depthwise tiles have rows only, their padded image computed
            // per channel or per block of rows.
            for r in 1..=12 {
                for order in [None, Some(ConvOrder::Rows)] {
                    space.push(Knobs { rows: Some(r), order, ..Knobs::default() });
                }
            }
        }
        "nn.matmul" | "nn.batch_matmul" | "nn.contrib_dense_pack" => {
            // Rows up to what the registers hold beside one vector of columns
            // (Winograd products: 16 columns, one AVX-512 vector).
            let cols: Vec<i64> = (1..=8).map(|v| v * lanes).collect();
            for (r, c) in tiles(1..=unit.registers as i64, &cols) {
                space.push(Knobs { rows: Some(r), cols: Some(c), ..Knobs::default() });
                space.push(Knobs { rows: Some(r), ..Knobs::default() });
            }
        }
        _ => {}
    }
    let print = |g: &PrimFunc| crate::tir::print_prim_func(g);
    // The rule's code by the same path as the candidates' (no fallback, no attributes added).
    let Ok(rule) = super::schedule_with_knobs(f.clone(), unit, &Knobs::default()) else { return Vec::new() };
    let rule_is_parallel = rule.body.has_parallel_loop();
    let mut seen = std::collections::BTreeSet::from([print(&rule)]);
    let mut valid: Vec<(f64, Knobs)> = Vec::new();
    for k in space {
        let Ok(g) = super::schedule_with_knobs(f.clone(), unit, &k) else { continue };
        if seen.insert(print(&g)) {
            // Matrix products count their columns in elements, loaded a vector at a time.
            let col_unit = if anchor == "nn.conv2d" { 1 } else { lanes };
            valid.push((tile_cost(&k, col_unit), k));
        }
    }
    valid.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
    let mut out: Vec<Knobs> = valid.into_iter().map(|(_, k)| k).take(limit).collect();
    if threads > 1 && rule_is_parallel {
        let serial: Vec<Knobs> = std::iter::once(Knobs::default())
            .chain(out.iter().take(3).cloned())
            .map(|k| Knobs { serial: true, ..k })
            .collect();
        out.splice(0..0, serial);
        out.truncate(limit.max(4));
    }
    out
}

/// Loads per multiply-add of a register tile (one load per row and per
/// column each reduction step, over rows × columns accumulators), with a
/// penalty for fewer accumulators than hide the FMA latency: the analytic
/// cost that orders the candidates before any is timed.
fn tile_cost(k: &Knobs, col_unit: i64) -> f64 {
    let (r, c) = (k.rows.unwrap_or(2) as f64, k.cols.map_or(4.0, |c| c as f64 / col_unit as f64));
    let accumulators = r * c;
    (r + c) / accumulators + if accumulators < 8.0 { 1.0 } else { 0.0 } + if k.order.is_some() { 0.05 } else { 0.0 }
}
