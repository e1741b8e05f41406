//! The configuration of every randomized (proptest) test of kiln-ir and
//! kiln: a fixed seed, so that each run on each machine generates the same
//! cases (`PROPTEST_RNG_SEED=<n>` explores others), and no regression files —
//! a failure reproduces from the seed, and proptest's message shows the
//! shrunk case.

// Each test crate that includes this file uses a part of it.
#![allow(dead_code)]

use proptest::test_runner::{Config, RngSeed};

/// `cases` cases from the fixed seed.
pub fn config(cases: u32) -> Config {
    let default = Config::default();
    let rng_seed = match default.rng_seed {
        RngSeed::Random => RngSeed::Fixed(0x6b69_6c6e),
        chosen => chosen,
    };
    Config { cases, rng_seed, failure_persistence: None, ..default }
}

/// A sequence of choices drawn by proptest, read by code that builds a
/// random structure step by step (a mutation of a model or a text): each
/// [`Choices::below`] takes the next number. Proptest shrinks the sequence —
/// shorter, smaller numbers — and with it the structure, toward the first
/// alternative of every choice; past its end every choice is the first.
#[derive(Clone, Debug)]
pub struct Choices {
    values: Vec<u32>,
    at: usize,
}

impl Choices {
    /// Sequences of up to `max_len` choices.
    pub fn strategy(max_len: usize) -> impl proptest::strategy::Strategy<Value = Choices> {
        use proptest::strategy::Strategy;
        proptest::collection::vec(proptest::arbitrary::any::<u32>(), 0..=max_len)
            .prop_map(|values| Choices { values, at: 0 })
    }

    /// The next choice, in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        let v = self.values.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        v as usize % n.max(1)
    }

    /// One of `options` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[self.below(options.len())]
    }
}
